#version 450
// d = act(gate) * up. Gate is "a", up is "b"; both have d's shape and their
// own strides and offsets, so the halves of one tensor (fused GLU) and two
// separate tensors are the same case.
// Defines: A_TYPE (gate and up), D_TYPE; OP_SWIGLU, OP_GEGLU or
// OP_SWIGLU_OAI (gpt-oss: param0 = alpha, param1 = limit; gate clamped
// above, up on both sides, g * sigmoid(alpha g) * (u + 1)).
#include "common.glsl"
#include "activations.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 1, scalar) readonly buffer BufB { A_TYPE data_b[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

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
    const float g = float(data_a[p.a_off + i0 * p.nb00 + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03]);
    const float u = float(data_b[p.b_off + i0 * p.nb10 + i1 * p.nb11 + i2 * p.nb12 + i3 * p.nb13]);
#if defined(OP_SWIGLU)
    const float r = silu(g) * u;
#elif defined(OP_GEGLU)
    const float r = gelu(g) * u;
#elif defined(OP_SWIGLU_OAI)
    const float x = min(g, p.param1);
    const float y = clamp(u, -p.param1, p.param1);
    const float r = x / (1.0 + exp(-p.param0 * x)) * (y + 1.0);
#else
#error "no op defined"
#endif
    data_d[p.d_off + i0 * p.nb20 + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23] = D_TYPE(r);
}
