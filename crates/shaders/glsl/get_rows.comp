#version 450
// d[:, i10, i11, i12] = a[:, idx[i10, i11, i12], i11, i12]: rows of a
// gathered by I32 indices (b), converted to f32.
// Float a (QK == 1): one invocation per element; quantized a: one per four
// elements. a's strides are in blocks (quantized) or elements.
// Defines: an A type (see dequant.glsl); D_INT for an I32 a copied bit for bit.
#include "common.glsl"

layout(local_size_x = 256) in;

#if defined(D_INT)
#define QK 1
layout(binding = 0, scalar) readonly buffer BufA { int data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { int data_d[]; };
#else
#include "dequant.glsl"
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };
#endif
layout(binding = 1, scalar) readonly buffer BufIdx { int data_idx[]; };

#include "pc_4d.glsl"

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
#if QK == 1
    const uint per = p.ne00;
#else
    const uint per = p.ne00 / 4u;
#endif
    const uint i00 = (i % per) * (QK == 1 ? 1u : 4u); i /= per;
    const uint i10 = i % p.ne10; i /= p.ne10;
    const uint i11 = i % p.ne11;
    const uint i12 = i / p.ne11;
    const uint row = uint(data_idx[p.b_off + i10 * p.nb10 + i11 * p.nb11 + i12 * p.nb12]);
    const uint d0 = p.d_off + i00 + i10 * p.nb21 + i11 * p.nb22 + i12 * p.nb23;
    const uint a0 = p.a_off + row * p.nb01 + i11 * p.nb02 + i12 * p.nb03;
#if QK == 1
#if defined(D_INT)
    data_d[d0] = data_a[a0 + i00 * p.nb00];
#else
    data_d[d0] = a_elem(a0 + i00 * p.nb00);
#endif
#else
    const vec4 v = dequant4(a0 + i00 / QK, i00 % QK);
    data_d[d0] = v.x;
    data_d[d0 + 1u] = v.y;
    data_d[d0 + 2u] = v.z;
    data_d[d0 + 3u] = v.w;
#endif
}
