#version 450
// Matrix x vector: d[row, col] = dot(a row, b column) for few b columns.
// One workgroup per NUM_ROWS rows of a and one column of b; its invocations
// stride over the rows (b is loaded once for all rows), dequantizing a on
// the fly, then reduce.
// Specialization constant 0: workgroup size (a power of two); with
// SUBGROUP, a multiple of the subgroup size (subgroup reductions, then one
// across the subgroups in shared memory).
// Defines: an A type (see dequant.glsl); B_F16 for f16 b (else f32);
// SUBGROUP to reduce with subgroup arithmetic; MUL_MAT_ID for MUL_MAT_ID
// (see below).
#include "common.glsl"
#if defined(SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
#define NUM_ROWS 2u

#include "dequant.glsl"
#if defined(B_F16)
layout(binding = 1, scalar) readonly buffer BufB { float16_t data_b[]; };
#else
layout(binding = 1, scalar) readonly buffer BufB { float data_b[]; };
#endif
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };
#if defined(MUL_MAT_ID)
// The expert of each (slot, token).
layout(binding = 2, scalar) readonly buffer BufIds { int data_ids[]; };
#endif

#include "pc_mm.glsl"

shared float partial[WG * NUM_ROWS];

// Sums acc over the workgroup; the result is valid in invocation 0.
void reduce_rows(inout float acc[NUM_ROWS]) {
#if defined(SUBGROUP)
    [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
        acc[r] = subgroupAdd(acc[r]);
    }
    if (gl_NumSubgroups == 1u) {
        return;
    }
    if (subgroupElect()) {
        [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
            partial[r * WG + gl_SubgroupID] = acc[r];
        }
    }
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
            float s = 0.0;
            for (uint i = 0u; i < gl_NumSubgroups; i++) {
                s += partial[r * WG + i];
            }
            acc[r] = s;
        }
    }
#else
    const uint tid = gl_LocalInvocationID.x;
    [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
        partial[r * WG + tid] = acc[r];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
                partial[r * WG + tid] += partial[r * WG + tid + s];
            }
        }
        barrier();
    }
    if (tid == 0u) {
        [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
            acc[r] = partial[r * WG];
        }
    }
#endif
}

#if QK != 1
#define UNROLL 4u
// Adds elements k..k+3 (k a multiple of 4) of each row times b's.
void mmv_step(uint k, uint b0, uint arow[NUM_ROWS], inout float acc[NUM_ROWS]) {
    const uint kb = b0 + k;
    const vec4 bv = vec4(float(data_b[kb]), float(data_b[kb + 1u]), float(data_b[kb + 2u]),
                         float(data_b[kb + 3u]));
    const uint e = k % QK;
    [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
        const uint ib = arow[r] + k / QK;
        const vec2 s = dq_scale(ib, e);
        acc[r] += dot(dq4(ib, e, s), bv);
#if defined(A_Q4_1) || defined(A_Q5_1)
        // The min times the block's sum of b, once per block; b is dense:
        // its block of this column is block (b0 - b_off + k) / 32.
        if (e == 0u) {
            acc[r] += s.y * data_b[p.sums_off + (b0 - p.b_off + k) / 32u];
        }
#endif
    }
}
#endif

void main() {
    uint g = wg_linear();
    if (g >= p.tiles_m * p.N * p.n_batch) {
        return;
    }
    const uint row0 = (g % p.tiles_m) * NUM_ROWS; g /= p.tiles_m;
    const uint col = g % p.N;
    const uint batch = g / p.N;
#if defined(MUL_MAT_ID)
    // N slots per token, n_batch tokens; a's matrix is the slot's expert.
    // Reused fields: ne12 = number of experts, r2 = b's columns per token
    // (1 or N), r3 = ids' token stride, tiles_n = ids' offset (in ints).
    const uint i12 = batch;
    const uint i13 = 0u;
    const int ex = data_ids[p.tiles_n + col + batch * p.r3];
    if (ex < 0 || uint(ex) >= p.ne12) {
        return;
    }
    const uint a0 = p.a_off + uint(ex) * p.batch_a2;
    const uint b0 = p.b_off + (col % p.r2) * p.stride_b + batch * p.batch_b2;
#else
    const uint i12 = batch % p.ne12;
    const uint i13 = batch / p.ne12;
    const uint a0 = p.a_off + (i12 / p.r2) * p.batch_a2 + (i13 / p.r3) * p.batch_a3;
    const uint b0 = p.b_off + col * p.stride_b + i12 * p.batch_b2 + i13 * p.batch_b3;
#endif
    const uint tid = gl_LocalInvocationID.x;
    // Rows past the end repeat the last one and are not written.
    uint arow[NUM_ROWS];
    [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
        arow[r] = a0 + min(row0 + r, p.M - 1u) * p.stride_a;
    }

    float acc[NUM_ROWS];
    [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
        acc[r] = 0.0;
    }
#if QK == 1
    // Neighbouring invocations read neighbouring groups of 4 elements.
    for (uint k0 = 4u * tid; k0 < p.K; k0 += 4u * WG) {
        if (k0 + 4u <= p.K) {
            const vec4 bv = vec4(float(data_b[b0 + k0]), float(data_b[b0 + k0 + 1u]),
                                 float(data_b[b0 + k0 + 2u]), float(data_b[b0 + k0 + 3u]));
            [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
                const uint ia = arow[r] + k0;
                acc[r] += dot(vec4(a_elem(ia), a_elem(ia + 1u), a_elem(ia + 2u), a_elem(ia + 3u)), bv);
            }
        } else {
            for (uint k = k0; k < p.K; k++) {
                const float bv = float(data_b[b0 + k]);
                [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
                    acc[r] += a_elem(arow[r] + k) * bv;
                }
            }
        }
    }
#else
    // Each invocation takes 4 consecutive elements and the workgroup 4 WG
    // consecutive ones, so that neighbouring invocations read neighbouring
    // b values and neighbouring bytes of a (on a GPU, one memory
    // transaction serves the whole subgroup). K is a whole number of
    // blocks, so no group of 4 straddles two. The loop is unrolled UNROLL
    // times so that the loads of several steps are in flight together.
    const uint step = 4u * WG;
    uint k0 = 4u * tid;
    for (; k0 + (UNROLL - 1u) * step < p.K; k0 += UNROLL * step) {
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            mmv_step(k0 + u * step, b0, arow, acc);
        }
    }
    for (; k0 < p.K; k0 += step) {
        mmv_step(k0, b0, arow, acc);
    }
#endif
    reduce_rows(acc);
    if (tid == 0u) {
        const uint d0 = p.d_off + col * p.stride_d + i12 * p.batch_d2 + i13 * p.batch_d3;
        [[unroll]] for (uint r = 0u; r < NUM_ROWS; r++) {
            if (row0 + r < p.M) {
                data_d[d0 + row0 + r] = acc[r];
            }
        }
    }
}
