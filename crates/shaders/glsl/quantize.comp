#version 450
// Copies into a quantized tensor, one invocation per block of 32:
// MODE_CPY: d = a in logical order (any shapes of equal size and strides);
// MODE_SET_ROWS: rows of a scattered to d's rows at I32 / I64 indices (b,
// read as 32-bit words as in set_rows.comp). d's strides are in blocks.
// Defines: A_TYPE (float or float16_t), a D type (see quantize.glsl), a mode.
#include "common.glsl"

layout(local_size_x = 64) in;

#if defined(MODE_CPY)
layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
#else
layout(binding = 1, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 2, scalar) readonly buffer BufIdx { uint data_idx[]; };
#endif

#include "pc_4d.glsl"
#include "quantize.glsl"

void main() {
    const uint ib = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (ib >= p.n) {
        return;
    }
    float x[32];
#if defined(MODE_CPY)
    const uint l0 = ib * 32u;
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        x[j] = float(data_a[a_index(l0 + j)]);
    }
    uint r = l0;
    const uint i0 = r % p.ne20; r /= p.ne20;
    const uint i1 = r % p.ne21; r /= p.ne21;
    const uint i2 = r % p.ne22;
    const uint i3 = r / p.ne22;
    quantize_block(x, p.d_off + i0 / 32u + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23);
#elif defined(MODE_SET_ROWS)
    const uint per_row = p.ne00 / 32u;
    const uint i00 = (ib % per_row) * 32u;
    uint r = ib / per_row;
    const uint i01 = r % p.ne01; r /= p.ne01;
    const uint i02 = r % p.ne02;
    const uint i03 = r / p.ne02;
    const uint row = data_idx[p.b_off + i01 * p.nb10 + (i02 % p.ne11) * p.nb11 + (i03 % p.ne12) * p.nb12];
    if (row >= p.ne21) {
        return;
    }
    const uint a0 = p.a_off + i01 * p.nb01 + i02 * p.nb02 + i03 * p.nb03;
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        x[j] = float(data_a[a0 + (i00 + j) * p.nb00]);
    }
    quantize_block(x, p.d_off + i00 / 32u + row * p.nb21 + i02 * p.nb22 + i03 * p.nb23);
#else
#error "no mode defined"
#endif
}
