#version 450
// Gated delta rule (GATED_DELTA_NET). One workgroup per state row: row j
// (column j of the state matrix S, value index j) of V head h of sequence
// s. Its invocations share the row's S elements (at most GDN_MAX_PER * WG
// of them) and carry them through the sequence's tokens in registers:
//   S[i] *= exp(g[0 or i, h, t, s])
//   d     = beta[h, t, s] * (v[j, h, t, s] - sum_i S[i] k[i])
//   S[i] += k[i] d
//   o[j, h, t, s] = sum_i S[i] q[i] / sqrt(S)
// with q and k of head h mod H_k. The result holds o [S, H_v, n_t, n_s],
// then the final states [S, S, H_v, n_s]. Strides are in elements; the
// element strides of every source are 1.
// Bindings: 0 q, 1 k, 2 v, 3 result, 4 g, 5 beta, 6 states.
#include "common.glsl"

#define WG 32u
#define GDN_MAX_PER 8u
layout(local_size_x = 32) in;

layout(binding = 0, scalar) readonly buffer BufQ { float data_q[]; };
layout(binding = 1, scalar) readonly buffer BufK { float data_k[]; };
layout(binding = 2, scalar) readonly buffer BufV { float data_v[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };
layout(binding = 4, scalar) readonly buffer BufG { float data_g[]; };
layout(binding = 5, scalar) readonly buffer BufB { float data_b[]; };
layout(binding = 6, scalar) readonly buffer BufS { float data_s[]; };

layout(push_constant) uniform PushConstants {
    uint q_off; uint k_off; uint v_off; uint g_off;
    uint b_off; uint s_off; uint d_off;
    uint n; uint h_k; uint h_v; uint n_t; uint n_s; uint g_ne0;
    uint q_nb1; uint q_nb2; uint q_nb3;
    uint k_nb1; uint k_nb2; uint k_nb3;
    uint v_nb1; uint v_nb2; uint v_nb3;
    uint g_nb1; uint g_nb2; uint g_nb3;
    uint b_nb1; uint b_nb2; uint b_nb3;
    uint s_nb1; uint s_nb2; uint s_nb3;
} p;

#include "reduce.glsl"

void main() {
    uint row = wg_linear();
    if (row >= p.n * p.h_v * p.n_s) {
        return;
    }
    const uint tid = gl_LocalInvocationID.x;
    const uint j = row % p.n; row /= p.n;
    const uint h = row % p.h_v;
    const uint s = row / p.h_v;
    const uint hk = h % p.h_k;
    const float scale = 1.0 / sqrt(float(p.n));
    const uint s0 = p.s_off + j * p.s_nb1 + h * p.s_nb2 + s * p.s_nb3;

    float st[GDN_MAX_PER];
    [[unroll]] for (uint e = 0u; e < GDN_MAX_PER; ++e) {
        const uint i = tid + e * WG;
        st[e] = i < p.n ? data_s[s0 + i] : 0.0;
    }
    for (uint t = 0u; t < p.n_t; ++t) {
        const uint q0 = p.q_off + hk * p.q_nb1 + t * p.q_nb2 + s * p.q_nb3;
        const uint k0 = p.k_off + hk * p.k_nb1 + t * p.k_nb2 + s * p.k_nb3;
        const uint g0 = p.g_off + h * p.g_nb1 + t * p.g_nb2 + s * p.g_nb3;
        const float beta = data_b[p.b_off + h * p.b_nb1 + t * p.b_nb2 + s * p.b_nb3];
        const float v = data_v[p.v_off + j + h * p.v_nb1 + t * p.v_nb2 + s * p.v_nb3];
        const float decay_head = exp(data_g[g0]);
        float part = 0.0;
        [[unroll]] for (uint e = 0u; e < GDN_MAX_PER; ++e) {
            const uint i = tid + e * WG;
            if (i < p.n) {
                st[e] *= p.g_ne0 == 1u ? decay_head : exp(data_g[g0 + i]);
                part += st[e] * data_k[k0 + i];
            }
        }
        const float d = (v - wg_sum(part)) * beta;
        part = 0.0;
        [[unroll]] for (uint e = 0u; e < GDN_MAX_PER; ++e) {
            const uint i = tid + e * WG;
            if (i < p.n) {
                st[e] += data_k[k0 + i] * d;
                part += st[e] * data_q[q0 + i];
            }
        }
        const float o = wg_sum(part) * scale;
        if (tid == 0u) {
            data_d[p.d_off + j + p.n * (h + p.h_v * (t + p.n_t * s))] = o;
        }
    }
    const uint out_len = p.n * p.h_v * p.n_t * p.n_s;
    const uint d0 = p.d_off + out_len + p.n * (j + p.n * (h + p.h_v * s));
    [[unroll]] for (uint e = 0u; e < GDN_MAX_PER; ++e) {
        const uint i = tid + e * WG;
        if (i < p.n) {
            data_d[d0 + i] = st[e];
        }
    }
}
