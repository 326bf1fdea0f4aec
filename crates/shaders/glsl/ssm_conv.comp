#version 450
// Depthwise causal convolution of Mamba: d[ch, t, s] =
// sum_k a[t + k, ch, s] * b[k, ch] for k < d_conv = ne10, summed in order
// of k. a = sx [d_conv - 1 + n_t, d_inner, n_s], b = the kernel
// [d_conv, d_inner], d [d_inner, n_t, n_s], all f32, any strides.
// One invocation per element of d.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 1, scalar) readonly buffer BufB { float data_b[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };

#include "pc_4d.glsl"

void main() {
    const uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    uint r = i;
    const uint ch = r % p.ne20; r /= p.ne20;
    const uint t = r % p.ne21;
    const uint s = r / p.ne21;
    const uint a0 = p.a_off + t * p.nb00 + ch * p.nb01 + s * p.nb02;
    const uint b0 = p.b_off + ch * p.nb11;
    float sum = 0.0;
    for (uint k = 0u; k < p.ne10; ++k) {
        sum += data_a[a0 + k * p.nb00] * data_b[b0 + k * p.nb10];
    }
    data_d[p.d_off + ch * p.nb20 + t * p.nb21 + s * p.nb22] = sum;
}
