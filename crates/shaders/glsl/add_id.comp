#version 450
// ADD_ID (per-expert biases): d[i0, i1, i2] = a[i0, i1, i2] + b[i0, ids[i1, i2]],
// a and d [n, n_used, n_tokens], b [n, n_expert], ids I32 [n_used, n_tokens]
// bound at binding 2. b is 2-d, so its ne12 carries the ids' first element
// and ne13 their row stride (in elements; the ids' elements are adjacent).
// An id outside 0..ne11 writes 0 (the builders never make one).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 1, scalar) readonly buffer BufB { float data_b[]; };
layout(binding = 2, scalar) readonly buffer BufI { int data_i[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };

#include "pc_4d.glsl"

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const uint i0 = i % p.ne20; i /= p.ne20;
    const uint i1 = i % p.ne21; i /= p.ne21;
    const uint i2 = i % p.ne22;
    const uint i3 = i / p.ne22;
    const int e = data_i[p.ne12 + i1 + i2 * p.ne13];
    float r = 0.0;
    if (e >= 0 && uint(e) < p.ne11) {
        const float x = data_a[p.a_off + i0 * p.nb00 + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03];
        r = x + data_b[p.b_off + i0 * p.nb10 + uint(e) * p.nb11];
    }
    data_d[p.d_off + i0 * p.nb20 + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23] = r;
}
