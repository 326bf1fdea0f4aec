#version 450
// d[0, i1, i2, i3] = sum of row (i1, i2, i3) of a, one workgroup per row;
// a and d f32, any strides.
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(binding = 0, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };

#include "pc_4d.glsl"

shared float partial[WG];

void main() {
    uint row = wg_linear();
    if (row >= p.n) {
        return;
    }
    const uint tid = gl_LocalInvocationID.x;
    const uint i1 = row % p.ne01; row /= p.ne01;
    const uint i2 = row % p.ne02;
    const uint i3 = row / p.ne02;
    const uint a0 = p.a_off + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03;
    float acc = 0.0;
    for (uint i = tid; i < p.ne00; i += WG) {
        acc += data_a[a0 + i * p.nb00];
    }
    partial[tid] = acc;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            partial[tid] += partial[tid + s];
        }
        barrier();
    }
    if (tid == 0u) {
        data_d[p.d_off + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23] = partial[0];
    }
}
