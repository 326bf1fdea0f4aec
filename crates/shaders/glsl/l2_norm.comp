#version 450
// L2_NORM: x / max(sqrt(sum(x^2)), eps) over each row of a, one workgroup
// per row. param0 = eps. Defines: A_TYPE, D_TYPE.
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

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
    float s = 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        const float x = float(data_a[a0 + i * p.nb00]);
        s += x * x;
    }
    const float scale = 1.0 / max(sqrt(wg_sum(s)), p.param0);
    for (uint i = tid; i < p.ne00; i += WG) {
        data_d[d0 + i * p.nb20] = D_TYPE(float(data_a[a0 + i * p.nb00]) * scale);
    }
}
