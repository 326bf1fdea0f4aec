#version 450
// Fused attention, one workgroup per (query row, head, batch):
// d = softmax(q k^T * scale [softcapped] + slope * mask) v, with keys
// processed WG at a time and an online softmax (running maximum and sum).
// q [D, n_q, n_head, ne3] f32; k [D, n_kv, n_head_kv, ne3k]; v [Dv, n_kv,
// n_head_kv, ne3k]; mask [n_kv, >= n_q, broadcast over dims 2 and 3];
// d [Dv, n_head, n_q, ne3] contiguous. D, Dv <= 256. With has_sinks, the
// f32 sinks (one logit per head) join each row's maximum and sum after the
// keys, as one more key without a value.
// Defines: KV_TYPE (k and v), M_TYPE (mask).
#include "common.glsl"

#define WG 64u
#define MAX_D 256u
layout(local_size_x = 64) in;

layout(binding = 0, scalar) readonly buffer BufQ { float data_q[]; };
layout(binding = 1, scalar) readonly buffer BufK { KV_TYPE data_k[]; };
layout(binding = 2, scalar) readonly buffer BufV { KV_TYPE data_v[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };
layout(binding = 4, scalar) readonly buffer BufM { M_TYPE data_m[]; };
layout(binding = 5, scalar) readonly buffer BufS { float data_s[]; };

layout(push_constant) uniform PushConstants {
    uint n_q; uint n_head; uint D; uint Dv; uint n_kv;
    uint q_off; uint k_off; uint v_off; uint m_off; uint d_off;
    uint q_nb1; uint q_nb2; uint q_nb3;
    uint k_nb1; uint k_nb2; uint k_nb3;
    uint v_nb1; uint v_nb2; uint v_nb3;
    uint m_nb1; uint m_nb2; uint m_nb3;
    uint m_ne2; uint m_ne3;
    uint rk2; uint rk3;
    uint has_mask;
    float scale;
    float max_bias;
    float softcap;
    uint s_off;
    uint has_sinks;
} p;

#include "reduce.glsl"

shared float q_row[MAX_D];
shared float probs[WG];

void main() {
    uint g = wg_linear();
    const uint iq1 = g % p.n_q; g /= p.n_q;
    const uint ih = g % p.n_head;
    const uint iq3 = g / p.n_head;
    const uint tid = gl_LocalInvocationID.x;
    const uint k2 = ih / p.rk2;
    const uint k3 = iq3 / p.rk3;
    const uint q0 = p.q_off + iq1 * p.q_nb1 + ih * p.q_nb2 + iq3 * p.q_nb3;
    const uint kb = p.k_off + k2 * p.k_nb2 + k3 * p.k_nb3;
    const uint vb = p.v_off + k2 * p.v_nb2 + k3 * p.v_nb3;
    const uint mb = p.m_off + iq1 * p.m_nb1 + (ih % p.m_ne2) * p.m_nb2 + (iq3 % p.m_ne3) * p.m_nb3;

    float slope = 1.0;
    if (p.max_bias > 0.0) {
        const uint n_head_log2 = 1u << uint(floor(log2(float(p.n_head))));
        const float m0 = exp2(-p.max_bias / float(n_head_log2));
        const float m1 = exp2(-p.max_bias / 2.0 / float(n_head_log2));
        slope = ih < n_head_log2 ? pow(m0, float(ih + 1u)) : pow(m1, float(2u * (ih - n_head_log2) + 1u));
    }

    for (uint i = tid; i < p.D; i += WG) {
        q_row[i] = data_q[q0 + i];
    }
    barrier();

    float acc[MAX_D / WG];
    [[unroll]] for (uint t = 0u; t < MAX_D / WG; t++) {
        acc[t] = 0.0;
    }
    float run_max = -1.0 / 0.0;
    float run_sum = 0.0;

    for (uint c0 = 0u; c0 < p.n_kv; c0 += WG) {
        const uint j = c0 + tid;
        float s = -1.0 / 0.0;
        if (j < p.n_kv) {
            const uint kr = kb + j * p.k_nb1;
            float dot_qk = 0.0;
            for (uint i = 0u; i < p.D; i++) {
                dot_qk += q_row[i] * float(data_k[kr + i]);
            }
            s = dot_qk * p.scale;
            if (p.softcap != 0.0) {
                s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
            }
            if (p.has_mask != 0u) {
                s += slope * float(data_m[mb + j]);
            }
        }
        const float new_max = max(run_max, wg_max(s));
        if (new_max == -1.0 / 0.0) {
            // Everything so far is masked out.
            continue;
        }
        const float e = exp(s - new_max);
        probs[tid] = e;
        const float alpha = exp(run_max - new_max);
        run_sum = run_sum * alpha + wg_sum(e);
        run_max = new_max;
        // wg_sum's barriers also made probs visible.
        const uint n = min(WG, p.n_kv - c0);
        [[unroll]] for (uint t = 0u; t < MAX_D / WG; t++) {
            const uint o = tid + t * WG;
            if (o < p.Dv) {
                float a = acc[t] * alpha;
                for (uint jj = 0u; jj < n; jj++) {
                    a += probs[jj] * float(data_v[vb + (c0 + jj) * p.v_nb1 + o]);
                }
                acc[t] = a;
            }
        }
        barrier();
    }

    if (p.has_sinks != 0u) {
        const float sk = data_s[p.s_off + ih];
        const float new_max = max(run_max, sk);
        const float alpha = exp(run_max - new_max);
        run_sum = run_sum * alpha + exp(sk - new_max);
        [[unroll]] for (uint t = 0u; t < MAX_D / WG; t++) {
            acc[t] *= alpha;
        }
    }

    const uint d0 = p.d_off + ((iq3 * p.n_q + iq1) * p.n_head + ih) * p.Dv;
    [[unroll]] for (uint t = 0u; t < MAX_D / WG; t++) {
        const uint o = tid + t * WG;
        if (o < p.Dv) {
            data_d[d0 + o] = run_sum > 0.0 ? acc[t] / run_sum : 0.0;
        }
    }
}
