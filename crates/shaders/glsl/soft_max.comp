#version 450
// softmax(a * scale + slope * mask) over each row, one workgroup per row.
// param0 = scale, param1 = max_bias (ALiBi; the slope of head i2 follows
// ggml: m0 = 2^(-max_bias / n_head_log2), m1 = 2^(-max_bias / 2 / n_head_log2)).
// b is the mask [ne00, >= ne01, broadcast over dims 2 and 3]; ne10 == 0
// means no mask. Attention sinks (one f32 logit per head i2, joining every
// row's maximum and sum) are bound at binding 2 when ne20 != 0: ne20 is then
// 1 + the sinks' first element (d's sizes are a's, so ne2x are free).
// Defines: A_TYPE, B_TYPE (mask), D_TYPE.
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 1, scalar) readonly buffer BufB { B_TYPE data_b[]; };
layout(binding = 2, scalar) readonly buffer BufC { float data_c[]; };
layout(binding = 3, scalar) buffer BufD { D_TYPE data_d[]; };

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
    const bool has_mask = p.ne10 != 0u;
    const uint b0 = has_mask ? p.b_off + i1 * p.nb11 + (i2 % p.ne12) * p.nb12 + (i3 % p.ne13) * p.nb13 : 0u;
    const uint tid = gl_LocalInvocationID.x;

    float slope = 1.0;
    if (p.param1 > 0.0) {
        const uint n_head_log2 = 1u << uint(floor(log2(float(p.ne02))));
        const float m0 = exp2(-p.param1 / float(n_head_log2));
        const float m1 = exp2(-p.param1 / 2.0 / float(n_head_log2));
        slope = i2 < n_head_log2 ? pow(m0, float(i2 + 1u)) : pow(m1, float(2u * (i2 - n_head_log2) + 1u));
    }

    float mx = -1.0 / 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        float x = float(data_a[a0 + i * p.nb00]) * p.param0;
        if (has_mask) {
            x += slope * float(data_b[b0 + i * p.nb10]);
        }
        data_d[d0 + i * p.nb20] = D_TYPE(x);
        mx = max(mx, x);
    }
    mx = wg_max(mx);
    const bool has_sinks = p.ne20 != 0u;
    const float sink = has_sinks ? data_c[p.ne20 - 1u + i2] : 0.0;
    if (has_sinks) {
        mx = max(mx, sink);
    }
    float s = 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        const float e = exp(float(data_d[d0 + i * p.nb20]) - mx);
        data_d[d0 + i * p.nb20] = D_TYPE(e);
        s += e;
    }
    float total = wg_sum(s);
    if (has_sinks) {
        total += exp(sink - mx);
    }
    const float inv = 1.0 / total;
    for (uint i = tid; i < p.ne00; i += WG) {
        data_d[d0 + i * p.nb20] = D_TYPE(float(data_d[d0 + i * p.nb20]) * inv);
    }
}
