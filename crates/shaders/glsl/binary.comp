#version 450
// d = a OP b with b broadcast over a (each dim of b divides a's).
// Defines: A_TYPE, B_TYPE, D_TYPE; OP_ADD, OP_MUL or OP_DIV.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 1, scalar) readonly buffer BufB { B_TYPE data_b[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

#include "pc_4d.glsl"

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const uint i0 = i % p.ne00; i /= p.ne00;
    const uint i1 = i % p.ne01; i /= p.ne01;
    const uint i2 = i % p.ne02;
    const uint i3 = i / p.ne02;
    const float a = float(data_a[p.a_off + i0 * p.nb00 + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03]);
    const float b = float(data_b[p.b_off + (i0 % p.ne10) * p.nb10 + (i1 % p.ne11) * p.nb11 +
                                 (i2 % p.ne12) * p.nb12 + (i3 % p.ne13) * p.nb13]);
#if defined(OP_ADD)
    const float r = a + b;
#elif defined(OP_MUL)
    const float r = a * b;
#elif defined(OP_DIV)
    const float r = a / b;
#else
#error "no op defined"
#endif
    data_d[p.d_off + i0 * p.nb20 + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23] = D_TYPE(r);
}
