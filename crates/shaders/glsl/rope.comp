#version 450
// Rotary position embedding of a [ne0 = head dim, ne1 = heads, ne2 = tokens,
// ne3] at the I32 positions pos[ne2], with optional per-pair frequency
// factors and YaRN. One invocation per pair of elements.
// MODE_NORMAL rotates (x[2i], x[2i+1]); MODE_NEOX rotates (x[i], x[i + n_dims/2]).
// Defines: A_TYPE, D_TYPE.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { A_TYPE data_a[]; };
layout(binding = 1, scalar) readonly buffer BufPos { int data_pos[]; };
layout(binding = 2, scalar) readonly buffer BufFF { float data_ff[]; };
layout(binding = 3, scalar) writeonly buffer BufD { D_TYPE data_d[]; };

layout(push_constant) uniform PushConstants {
    uint n;         // pairs: ne0 / 2 * ne1 * ne2 * ne3
    uint ne0; uint ne1; uint ne2;
    uint nb01; uint nb02; uint nb03;   // a, in elements (nb00 == 1)
    uint nb1; uint nb2; uint nb3;      // d, in elements (nb0 == 1)
    uint a_off; uint pos_off; uint ff_off; uint d_off;
    uint n_dims;
    uint has_ff;
    float theta_scale;   // freq_base^(-2 / n_dims)
    float freq_scale;
    float ext_factor;
    float attn_factor;
    float corr_low;
    float corr_high;
} p;

float yarn_ramp(float low, float high, uint i0) {
    const float y = (float(i0 / 2u) - low) / max(0.001, high - low);
    return 1.0 - min(1.0, max(0.0, y));
}

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const uint half_ne0 = p.ne0 / 2u;
    const uint i0 = (i % half_ne0) * 2u; i /= half_ne0;
    const uint i1 = i % p.ne1; i /= p.ne1;
    const uint i2 = i % p.ne2;
    const uint i3 = i / p.ne2;
    const uint a0 = p.a_off + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03;
    const uint d0 = p.d_off + i1 * p.nb1 + i2 * p.nb2 + i3 * p.nb3;

    if (i0 >= p.n_dims) {
        data_d[d0 + i0] = D_TYPE(float(data_a[a0 + i0]));
        data_d[d0 + i0 + 1u] = D_TYPE(float(data_a[a0 + i0 + 1u]));
        return;
    }

    const float ff = p.has_ff != 0u ? data_ff[p.ff_off + i0 / 2u] : 1.0;
    const float theta_extrap = float(data_pos[p.pos_off + i2]) * pow(p.theta_scale, float(i0 / 2u)) / ff;
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0) {
        const float mix = yarn_ramp(p.corr_low, p.corr_high, i0) * p.ext_factor;
        theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
        mscale *= 1.0 + 0.1 * log(1.0 / p.freq_scale);
    }
    const float c = cos(theta) * mscale;
    const float s = sin(theta) * mscale;

#if defined(MODE_NEOX)
    const uint j0 = i0 / 2u;
    const uint j1 = j0 + p.n_dims / 2u;
#elif defined(MODE_NORMAL)
    const uint j0 = i0;
    const uint j1 = i0 + 1u;
#else
#error "no mode defined"
#endif
    const float x0 = float(data_a[a0 + j0]);
    const float x1 = float(data_a[a0 + j1]);
    data_d[d0 + j0] = D_TYPE(x0 * c - x1 * s);
    data_d[d0 + j1] = D_TYPE(x0 * s + x1 * c);
}
