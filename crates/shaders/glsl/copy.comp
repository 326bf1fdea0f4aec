#version 450
// d = a converted to d's type, element by element in logical order. a and d
// may have different shapes of the same element count (CONT with a new
// shape) and any strides (CPY into a view, DUP of a permuted view).
// Defines: A_TYPE, D_TYPE (float, float16_t, int); SAME_TYPE when they are
// equal (a plain move, bit for bit); D_BF16 for a bf16 d (D_TYPE uint16_t).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

#include "pc_4d.glsl"

void main() {
    const uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
#if defined(SAME_TYPE)
    data_d[d_index(i)] = data_a[a_index(i)];
#elif defined(D_BF16)
    // Round to nearest even, NaNs stay quiet NaNs (as ggml).
    const uint u = floatBitsToUint(float(data_a[a_index(i)]));
    const uint h = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 64u : (u + (0x7fffu + ((u >> 16) & 1u))) >> 16;
    data_d[d_index(i)] = uint16_t(h);
#else
    data_d[d_index(i)] = D_TYPE(float(data_a[a_index(i)]));
#endif
}
