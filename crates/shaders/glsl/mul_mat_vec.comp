#version 450
// Matrix x vector: d[row, col] = dot(a row, b column) for few b columns.
// One workgroup per (row, column, batch); its invocations stride over the
// row in chunks of 32 elements, dequantizing a on the fly, then reduce.
// Defines: an A type (see dequant.glsl); B_F16 for f16 b (else f32);
// SUBGROUP to reduce with subgroup arithmetic first.
#include "common.glsl"
#if defined(SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#define WG 64u
layout(local_size_x = 64) in;

#include "dequant.glsl"
#if defined(B_F16)
layout(binding = 1, scalar) readonly buffer BufB { float16_t data_b[]; };
#else
layout(binding = 1, scalar) readonly buffer BufB { float data_b[]; };
#endif
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };

#include "pc_mm.glsl"

#if defined(SUBGROUP)
shared float partial[WG];
float reduce_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) {
        partial[gl_SubgroupID] = v;
    }
    barrier();
    float r = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) {
        r += partial[i];
    }
    return r;
}
#else
#include "reduce.glsl"
float reduce_sum(float v) {
    return wg_sum(v);
}
#endif

void main() {
    uint g = wg_linear();
    if (g >= p.M * p.N * p.n_batch) {
        return;
    }
    const uint row = g % p.M; g /= p.M;
    const uint col = g % p.N;
    const uint batch = g / p.N;
    const uint i12 = batch % p.ne12;
    const uint i13 = batch / p.ne12;
    const uint a0 = p.a_off + row * p.stride_a + (i12 / p.r2) * p.batch_a2 + (i13 / p.r3) * p.batch_a3;
    const uint b0 = p.b_off + col * p.stride_b + i12 * p.batch_b2 + i13 * p.batch_b3;
    const uint tid = gl_LocalInvocationID.x;

    float acc = 0.0;
    const uint n_chunks = (p.K + 31u) / 32u;
    for (uint c = tid; c < n_chunks; c += WG) {
        const uint k0 = c * 32u;
#if QK == 1
        if (k0 + 32u <= p.K) {
            [[unroll]] for (uint k = 0u; k < 32u; k++) {
                acc += a_elem(a0 + k0 + k) * float(data_b[b0 + k0 + k]);
            }
        } else {
            for (uint k = k0; k < p.K; k++) {
                acc += a_elem(a0 + k) * float(data_b[b0 + k]);
            }
        }
#else
        const uint ib = a0 + k0 / QK;
        const uint e0 = k0 % QK;
        [[unroll]] for (uint v = 0u; v < 8u; v++) {
            const vec4 av = dequant4(ib, e0 + 4u * v);
            const uint kb = b0 + k0 + 4u * v;
            acc += dot(av, vec4(float(data_b[kb]), float(data_b[kb + 1u]), float(data_b[kb + 2u]),
                                float(data_b[kb + 3u])));
        }
#endif
    }
    const float sum = reduce_sum(acc);
    if (tid == 0u) {
        data_d[p.d_off + row + col * p.stride_d + i12 * p.batch_d2 + i13 * p.batch_d3] = sum;
    }
}
