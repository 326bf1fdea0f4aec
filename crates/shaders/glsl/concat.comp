#version 450
// d = a and b joined along axis `dim` (param0): element (i0, i1, i2, i3) of
// d comes from a while i_dim < a.ne_dim, else from b at i_dim - a.ne_dim.
// One invocation per element of d; any strides. The bytes are copied, so
// one variant serves every type of the element's width.
// Defines: E_TYPE (uint for 32-bit elements, uint16_t for 16-bit ones).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { E_TYPE data_a[]; };
layout(binding = 1, scalar) readonly buffer BufB { E_TYPE data_b[]; };
layout(binding = 3, scalar) writeonly buffer BufD { E_TYPE data_d[]; };

#include "pc_4d.glsl"

void main() {
    const uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    uint r = i;
    uint idx[4];
    idx[0] = r % p.ne20; r /= p.ne20;
    idx[1] = r % p.ne21; r /= p.ne21;
    idx[2] = r % p.ne22;
    idx[3] = r / p.ne22;
    const uint dim = uint(p.param0);
    const uint a_ne[4] = uint[4](p.ne00, p.ne01, p.ne02, p.ne03);
    // Storage to storage, so that 16-bit elements need no 16-bit arithmetic.
    if (idx[dim] < a_ne[dim]) {
        data_d[d_index(i)] = data_a[p.a_off + idx[0] * p.nb00 + idx[1] * p.nb01 + idx[2] * p.nb02 + idx[3] * p.nb03];
    } else {
        idx[dim] -= a_ne[dim];
        data_d[d_index(i)] = data_b[p.b_off + idx[0] * p.nb10 + idx[1] * p.nb11 + idx[2] * p.nb12 + idx[3] * p.nb13];
    }
}
