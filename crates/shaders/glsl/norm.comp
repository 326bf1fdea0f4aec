#version 450
// Row normalisation, one workgroup per row of a (rows of ne00 elements):
// OP_RMS_NORM: x / sqrt(mean(x^2) + eps); OP_NORM: (x - mean) / sqrt(var + eps).
// OP_RMS_NORM_MUL: the RMS norm times b (f32, broadcast over a as MUL
// broadcasts its second source), RMS_NORM and MUL fused.
// param0 = eps. Defines: A_TYPE, D_TYPE.
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };
#if defined(OP_RMS_NORM_MUL)
layout(binding = 1, scalar) readonly buffer BufB { float data_b[]; };
#endif

#include "pc_4d.glsl"
#include "reduce.glsl"

void main() {
    uint row = wg_linear();
    if (row >= p.n) {
        return;
    }
    const uint i1 = row % p.ne01; row /= p.ne01;
    const uint i2 = row % p.ne02;
    const uint i3 = row / p.ne02;
    const uint a0 = p.a_off + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03;
    const uint d0 = p.d_off + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23;
    const uint tid = gl_LocalInvocationID.x;
    const float n = float(p.ne00);

#if defined(OP_RMS_NORM)
    float s = 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        const float x = float(data_a[a0 + i * p.nb00]);
        s += x * x;
    }
    const float scale = 1.0 / sqrt(wg_sum(s) / n + p.param0);
    for (uint i = tid; i < p.ne00; i += WG) {
        data_d[d0 + i * p.nb20] = D_TYPE(float(data_a[a0 + i * p.nb00]) * scale);
    }
#elif defined(OP_RMS_NORM_MUL)
    float s = 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        const float x = float(data_a[a0 + i * p.nb00]);
        s += x * x;
    }
    const float scale = 1.0 / sqrt(wg_sum(s) / n + p.param0);
    const uint b0 = p.b_off + (i1 % p.ne11) * p.nb11 + (i2 % p.ne12) * p.nb12 + (i3 % p.ne13) * p.nb13;
    for (uint i = tid; i < p.ne00; i += WG) {
        const float y = float(data_a[a0 + i * p.nb00]) * scale;
        data_d[d0 + i * p.nb20] = D_TYPE(y * data_b[b0 + (i % p.ne10) * p.nb10]);
    }
#elif defined(OP_NORM)
    float s = 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        s += float(data_a[a0 + i * p.nb00]);
    }
    const float mean = wg_sum(s) / n;
    float v = 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        const float x = float(data_a[a0 + i * p.nb00]) - mean;
        v += x * x;
    }
    const float scale = 1.0 / sqrt(wg_sum(v) / n + p.param0);
    for (uint i = tid; i < p.ne00; i += WG) {
        data_d[d0 + i * p.nb20] = D_TYPE((float(data_a[a0 + i * p.nb00]) - mean) * scale);
    }
#else
#error "no op defined"
#endif
}
