#version 450
// d = a dequantized, element by element in logical order, four elements
// per invocation (a's and d's rows hold a multiple of four). a and d may
// have different shapes of the same size and any strides; a's are in blocks.
// Defines: a quantized A type (see dequant.glsl), D_TYPE (float, float16_t).
#include "common.glsl"

layout(local_size_x = 256) in;

#include "dequant.glsl"
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

#include "pc_4d.glsl"

void main() {
    const uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const uint l = 4u * i;
    uint r = l;
    const uint i0 = r % p.ne00; r /= p.ne00;
    const uint i1 = r % p.ne01; r /= p.ne01;
    const uint i2 = r % p.ne02;
    const uint i3 = r / p.ne02;
    const vec4 v = dequant4(p.a_off + i0 / QK + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03, i0 % QK);
    const uint d0 = d_index(l);
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        data_d[d0 + k * p.nb20] = D_TYPE(v[k]);
    }
}
