#version 450
// d = f(a) element-wise; a and d have the same shape, any strides.
// Defines: A_TYPE, D_TYPE; OP_SILU, OP_GELU, OP_RELU, OP_NEG, OP_TANH,
// OP_SIGMOID, OP_EXP, OP_SOFTPLUS, OP_SCALE (param0 = scale) or OP_CLAMP (param0 = min, param1 = max).
#include "common.glsl"
#include "activations.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

#include "pc_4d.glsl"

void main() {
    const uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const float x = float(data_a[a_index(i)]);
#if defined(OP_SILU)
    const float r = silu(x);
#elif defined(OP_GELU)
    const float r = gelu(x);
#elif defined(OP_RELU)
    const float r = max(x, 0.0);
#elif defined(OP_NEG)
    const float r = -x;
#elif defined(OP_TANH)
    const float r = tanh(x);
#elif defined(OP_SIGMOID)
    const float r = 1.0 / (1.0 + exp(-x));
#elif defined(OP_EXP)
    const float r = exp(x);
#elif defined(OP_SOFTPLUS)
    const float r = x > 20.0 ? x : log(1.0 + exp(x));
#elif defined(OP_SCALE)
    const float r = x * p.param0;
#elif defined(OP_CLAMP)
    const float r = min(max(x, p.param0), p.param1);
#else
#error "no op defined"
#endif
    data_d[d_index(i)] = D_TYPE(r);
}
