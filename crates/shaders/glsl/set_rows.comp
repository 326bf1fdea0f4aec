#version 450
// d[:, idx[i01, i02 % ne11, i03 % ne12], i02, i03] = a[:, i01, i02, i03]:
// rows of a scattered into d at I32 or I64 indices (b, read as 32-bit words:
// strides in words, the low word of an I64 is first).
// Defines: A_TYPE, D_TYPE; D_BF16 for a bf16 d (D_TYPE uint16_t).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 1, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 2, scalar) readonly buffer BufIdx { uint data_idx[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

#include "pc_4d.glsl"

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const uint i00 = i % p.ne00; i /= p.ne00;
    const uint i01 = i % p.ne01; i /= p.ne01;
    const uint i02 = i % p.ne02;
    const uint i03 = i / p.ne02;
    const uint row = data_idx[p.b_off + i01 * p.nb10 + (i02 % p.ne11) * p.nb11 + (i03 % p.ne12) * p.nb12];
    if (row >= p.ne21) {
        return;
    }
    const float x = float(data_a[p.a_off + i00 * p.nb00 + i01 * p.nb01 + i02 * p.nb02 + i03 * p.nb03]);
    const uint di = p.d_off + i00 * p.nb20 + row * p.nb21 + i02 * p.nb22 + i03 * p.nb23;
#if defined(D_BF16)
    // Round to nearest even, NaNs stay quiet NaNs (as ggml).
    const uint u = floatBitsToUint(x);
    data_d[di] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 64u : (u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
#else
    data_d[di] = D_TYPE(x);
#endif
}
