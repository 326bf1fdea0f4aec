#version 450
#if defined(INT_DOT)
// OpSDot (SPV_KHR_integer_dot_product) on 4 signed bytes packed in a word,
// written as a SPIR-V intrinsic (the glslang of the build may predate
// GL_EXT_integer_dot_product).
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_packed(uint a, uint b, spirv_literal int packed_format);
int dot4x8(uint a, uint b) {
    return sdot_packed(a, b, 0);
}
#endif
#if defined(SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// Fused matrix x vector products: one dispatch for up to three products
// d_m = a_m^T b that share their b (a few columns), with
//   - optionally an RMS norm of each column of b times a weight vector
//     first (RMS_NORM then MUL of the graph; the normalized b is never
//     written to memory),
//   - b rounded to the weight type's dot-product partner as ggml's CPU
//     backend rounds it (R_* define; see round_act.comp), inside the
//     workgroup, so that no pre-pass is needed,
//   - and after the products either nothing, the addition of a tensor c
//     (a bias or the residual: ADD), or a gated unit act(d_0) * d_1
//     (SWIGLU / GEGLU of two products, written to d_0).
// Each workgroup stages its column of b in shared memory (BK floats, at
// least K), then computes 4 rows of one product (or 2 rows of both
// products of a gated unit). All a matrices are read through one binding
// (slot 0), each from its own offset.
// Specialization constants: 0 = workgroup size (128: the norm then sums
// in the order of norm.comp), 1 = BK (a multiple of 256).
// Defines: an A type (see dequant.glsl); R_Q8_0, R_Q8_1, R_Q8_K, R_F16 or
// R_BF16 (none for f32 weights). Q4_0 and Q8_0 rows are addressed in
// 16-bit words, other types in blocks (or elements).
// INT_DOT (Q4_0 and Q8_0 weights, R_Q8_0):
// b is kept as packed 8-bit integers with a scale per block and each group
// of 4 weights is multiplied by integer dot products
// (VK_KHR_shader_integer_dot_product), then scaled. SUBGROUP: the rows'
// sums are reduced with subgroup arithmetic, then across the subgroups
// (WG a multiple of the subgroup size).
#include "common.glsl"
#include "activations.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint BK = 256;
#define ROWS 4u

#include "dequant.glsl"
#include "rounding.glsl"

#if defined(A_Q4_0) || defined(A_Q8_0)
#define A_WORDS
// Four bytes from 16-bit word w of a (little-endian).
uint a_word4(uint w) {
    return uint(data_a16[w]) | (uint(data_a16[w + 1u]) << 16);
}
#endif

layout(binding = 1, scalar) readonly buffer BufB { float data_b[]; };
layout(binding = 2, scalar) readonly buffer BufW { float data_w[]; };
layout(binding = 3, scalar) writeonly buffer BufD0 { float data_d0[]; };
layout(binding = 4, scalar) writeonly buffer BufD1 { float data_d1[]; };
layout(binding = 5, scalar) writeonly buffer BufD2 { float data_d2[]; };
layout(binding = 6, scalar) readonly buffer BufC { float data_c[]; };
layout(binding = 7, scalar) writeonly buffer BufN { float data_n[]; };

// Modes of the epilogue.
#define MODE_PLAIN 0u
#define MODE_ADD 1u
#define MODE_SWIGLU 2u
#define MODE_GEGLU 3u

layout(push_constant) uniform PushConstants {
    uint K;
    uint N;
    // Number of products (1 to 3; 2 for the gated units).
    uint nm;
    uint mode;
    // 1: RMS norm of b times w first.
    uint norm;
    float eps;
    uint b_off;
    uint b_stride;
    uint w_off;
    // c[row, col] = data_c[c_off + row * c_s0 + col * c_s1].
    uint c_off;
    uint c_s0;
    uint c_s1;
    // Per product: rows, offset of a (in blocks or elements), row stride of
    // a, offset of d and its column stride (in floats).
    uint M[3];
    uint a_off[3];
    uint stride_a[3];
    uint d_off[3];
    uint d_stride[3];
    // 1: the normalized b (before rounding) is also written, at
    // n[i, col] = data_n[n_off + col * n_stride + i] (read elsewhere).
    uint write_norm;
    uint n_off;
    uint n_stride;
} p;

shared float bsh[BK];
shared float bsums[BK / 32u];
shared float red[WG];
shared float partial[WG * ROWS];
#if defined(INT_DOT)
shared uint bq[BK / 4u];
shared float bdq[BK / 32u];
#endif

float wg_sum_red(float v) {
    red[gl_LocalInvocationID.x] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (gl_LocalInvocationID.x < s) {
            red[gl_LocalInvocationID.x] += red[gl_LocalInvocationID.x + s];
        }
        barrier();
    }
    const float r = red[0];
    barrier();
    return r;
}

void store(uint m, uint i, float v) {
    if (m == 0u) {
        data_d0[i] = v;
    } else if (m == 1u) {
        data_d1[i] = v;
    } else {
        data_d2[i] = v;
    }
}

uint tiles(uint m) {
    const uint per = p.mode >= MODE_SWIGLU ? ROWS / 2u : ROWS;
    return (p.M[m] + per - 1u) / per;
}

// Rounds b in shared memory to the dot-product partner of a's type, bit
// for bit as round_act.comp does.
void round_b() {
    const uint tid = gl_LocalInvocationID.x;
#if defined(R_Q8_0) || defined(R_Q8_1)
    for (uint ib = tid; ib < p.K / 32u; ib += WG) {
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) {
            const float x = bsh[ib * 32u + j];
            const float ax = isnan(x) ? 0.0 : abs(x);
            if (ax > amax) {
                amax = ax;
            }
        }
        const float d32 = div_rn(amax, 127.0);
        const float d = f16_to_f32(f32_to_f16(d32));
        const float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
        int sum = 0;
#if defined(INT_DOT)
        for (uint j4 = 0u; j4 < 8u; j4++) {
            uint packed = 0u;
            for (uint l = 0u; l < 4u; l++) {
                precise float t = bsh[ib * 32u + 4u * j4 + l] * id;
                const int q = clamp(nearest_int(t), -128, 127);
                packed |= (uint(q) & 0xffu) << (8u * l);
            }
            bq[ib * 8u + j4] = packed;
        }
        bdq[ib] = d;
#else
        for (uint j = 0u; j < 32u; j++) {
            precise float t = bsh[ib * 32u + j] * id;
            const int q = clamp(nearest_int(t), -128, 127);
            bsh[ib * 32u + j] = d * float(q);
            sum += q;
        }
#endif
#if defined(R_Q8_1)
        precise float s = d32 * float(sum);
        bsums[ib] = f16_to_f32(f32_to_f16(s)) - d * float(sum);
#endif
    }
#elif defined(R_Q8_K)
    for (uint ib = tid; ib < p.K / 256u; ib += WG) {
        float amax = 0.0;
        float vmax = 0.0;
        for (uint j = 0u; j < 256u; j++) {
            const float x = bsh[ib * 256u + j];
            const float ax = isnan(x) ? 0.0 : abs(x);
            if (ax > amax) {
                amax = ax;
                vmax = x;
            }
        }
        if (amax == 0.0) {
            for (uint j = 0u; j < 256u; j++) {
                bsh[ib * 256u + j] = 0.0;
            }
            continue;
        }
        const float is = div_rn(127.0, amax);
        const float ds = div_rn(1.0, is);
        const float iscale = vmax > 0.0 ? -is : is;
        const float d = vmax > 0.0 ? -ds : ds;
        for (uint j = 0u; j < 256u; j++) {
            precise float t = iscale * bsh[ib * 256u + j];
            const int q = min(nearest_int(t), 127);
            bsh[ib * 256u + j] = d * float(q);
        }
    }
#elif defined(R_BF16)
    for (uint i = tid; i < p.K; i += WG) {
        const uint u = floatBitsToUint(bsh[i]);
        const uint h = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 64u : (u + (0x7fffu + ((u >> 16) & 1u))) >> 16;
        bsh[i] = uintBitsToFloat(h << 16);
    }
#elif defined(R_F16)
    for (uint i = tid; i < p.K; i += WG) {
        bsh[i] = f16_to_f32(f32_to_f16(bsh[i]));
    }
#endif
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    uint t = wg_linear();
    const bool glu = p.mode >= MODE_SWIGLU;
    uint total = tiles(0u);
    if (!glu) {
        for (uint m = 1u; m < p.nm; m++) {
            total += tiles(m);
        }
    }
    if (t >= total * p.N) {
        return;
    }
    const uint col = t / total;
    t %= total;
    const bool first_tile = t == 0u;
    uint m = 0u;
    while (!glu && m + 1u < p.nm && t >= tiles(m)) {
        t -= tiles(m);
        m++;
    }

    // b's column, normalized and rounded.
    const uint b0 = p.b_off + col * p.b_stride;
    for (uint i = tid; i < p.K; i += WG) {
        bsh[i] = data_b[b0 + i];
    }
    if (p.norm != 0u) {
        float s = 0.0;
        for (uint i = tid; i < p.K; i += WG) {
            const float x = data_b[b0 + i];
            s += x * x;
        }
        const float scale = 1.0 / sqrt(wg_sum_red(s) / float(p.K) + p.eps);
        for (uint i = tid; i < p.K; i += WG) {
            const float y = bsh[i] * scale;
            bsh[i] = y * data_w[p.w_off + i];
        }
    }
    barrier();
    if (p.write_norm != 0u && first_tile) {
        for (uint i = tid; i < p.K; i += WG) {
            data_n[p.n_off + col * p.n_stride + i] = bsh[i];
        }
        // Read before the rounding overwrites it.
        barrier();
    }
    round_b();
    barrier();

    // The rows: 4 of product m, or 2 of each product of a gated unit.
    uint arow[ROWS];
    uint row0;
    if (glu) {
        row0 = t * (ROWS / 2u);
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            const uint mm = r / (ROWS / 2u);
            const uint row = min(row0 + r % (ROWS / 2u), p.M[mm] - 1u);
            arow[r] = p.a_off[mm] + row * p.stride_a[mm];
        }
    } else {
        row0 = t * ROWS;
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            arow[r] = p.a_off[m] + min(row0 + r, p.M[m] - 1u) * p.stride_a[m];
        }
    }
    float acc[ROWS];
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        acc[r] = 0.0;
    }
#if defined(A_WORDS)
    // Q4_0 and Q8_0 rows are addressed in 16-bit words (row offsets and
    // strides in words), so that products whose weights lie an odd number
    // of bytes apart share the binding.
    for (uint k = 4u * tid; k < p.K; k += 4u * WG) {
        const uint e = k % 32u;
#if defined(INT_DOT)
        const uint bp = bq[k / 4u];
        const float db = bdq[k / 32u];
#else
        const vec4 bv = vec4(bsh[k], bsh[k + 1u], bsh[k + 2u], bsh[k + 3u]);
#endif
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            const uint w = arow[r] + (k / 32u) * (BLOCK_BYTES / 2u);
            const float da = unpackHalf2x16(uint(data_a16[w])).x;
#if defined(A_Q8_0)
            const uint v = a_word4(w + 1u + e / 2u);
#else
            const uint v4 = a_word4(w + 1u + (e & 15u) / 2u);
#endif
#if defined(INT_DOT)
#if defined(A_Q8_0)
            const int s = dot4x8(v, bp);
#else
            const uint v = (v4 >> ((e >> 4) * 4u)) & 0x0f0f0f0fu;
            const int s = dot4x8(v, bp) - 8 * dot4x8(0x01010101u, bp);
#endif
            acc[r] += float(s) * (da * db);
#else
#if defined(A_Q8_0)
            const int iv = int(v);
            const vec4 q = vec4((iv << 24) >> 24, (iv << 16) >> 24, (iv << 8) >> 24, iv >> 24) * da;
#else
            const vec4 q = (nibbles(v4, (e >> 4) * 4u) - 8.0) * da;
#endif
            acc[r] += dot(q, bv);
#endif
        }
    }
#elif QK == 1
    for (uint k0 = 4u * tid; k0 < p.K; k0 += 4u * WG) {
        if (k0 + 4u <= p.K) {
            const vec4 bv = vec4(bsh[k0], bsh[k0 + 1u], bsh[k0 + 2u], bsh[k0 + 3u]);
            [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                const uint ia = arow[r] + k0;
                acc[r] += dot(vec4(a_elem(ia), a_elem(ia + 1u), a_elem(ia + 2u), a_elem(ia + 3u)), bv);
            }
        } else {
            for (uint k = k0; k < p.K; k++) {
                [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                    acc[r] += a_elem(arow[r] + k) * bsh[k];
                }
            }
        }
    }
#else
    for (uint k = 4u * tid; k < p.K; k += 4u * WG) {
        const vec4 bv = vec4(bsh[k], bsh[k + 1u], bsh[k + 2u], bsh[k + 3u]);
        const uint e = k % QK;
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            const uint ib = arow[r] + k / QK;
            const vec2 s = dq_scale(ib, e);
            acc[r] += dot(dq4(ib, e, s), bv);
#if defined(A_Q4_1) || defined(A_Q5_1)
            if (e == 0u) {
                acc[r] += s.y * bsums[k / 32u];
            }
#endif
        }
    }
#endif
#if defined(SUBGROUP)
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        acc[r] = subgroupAdd(acc[r]);
    }
    if (subgroupElect()) {
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            partial[r * WG + gl_SubgroupID] = acc[r];
        }
    }
    barrier();
    if (tid == 0u) {
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            float s = 0.0;
            for (uint i = 0u; i < gl_NumSubgroups; i++) {
                s += partial[r * WG + i];
            }
            partial[r * WG] = s;
        }
    }
#else
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        partial[r * WG + tid] = acc[r];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                partial[r * WG + tid] += partial[r * WG + tid + s];
            }
        }
        barrier();
    }
#endif
    if (tid != 0u) {
        return;
    }
    if (glu) {
        [[unroll]] for (uint r = 0u; r < ROWS / 2u; r++) {
            const uint row = row0 + r;
            if (row < p.M[0]) {
                const float g = partial[r * WG];
                const float u = partial[(r + ROWS / 2u) * WG];
                const float a = p.mode == MODE_SWIGLU ? silu(g) : gelu(g);
                data_d0[p.d_off[0] + col * p.d_stride[0] + row] = a * u;
            }
        }
        return;
    }
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        const uint row = row0 + r;
        if (row < p.M[m]) {
            float v = partial[r * WG];
            if (p.mode == MODE_ADD) {
                v += data_c[p.c_off + row * p.c_s0 + col * p.c_s1];
            }
            store(m, p.d_off[m] + col * p.d_stride[m] + row, v);
        }
    }
}
