#version 450
// RWKV-6 linear attention (RWKV_WKV6). One workgroup per head h of
// sequence s; invocation j (a value index, j < head size S) keeps column j
// of the head's state, S[i][j] for every key index i, in registers and
// carries it through the sequence's tokens:
//   kv = k[i] * v[j]
//   out[j] = sum_i r[i] * (u[i] * kv + S[i][j])
//   S[i][j] = S[i][j] * w[i] + kv
// The token's k, r and w rows and the bonus u are shared. Every source is
// contiguous F32: k, v, r, w [S, H, T], u [S, H], the states
// [S * S * H, n_s] (element j + S i of head h); the result holds the T
// output rows [S * H], then the final states in the states' layout.
// Bindings: 0 k, 1 v, 2 r, 3 result, 4 u, 5 w, 6 states.
#include "common.glsl"

#define MAX_HS 128u
layout(local_size_x = 128) in;

layout(binding = 0, scalar) readonly buffer BufK { float data_k[]; };
layout(binding = 1, scalar) readonly buffer BufV { float data_v[]; };
layout(binding = 2, scalar) readonly buffer BufR { float data_r[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };
layout(binding = 4, scalar) readonly buffer BufU { float data_u[]; };
layout(binding = 5, scalar) readonly buffer BufW { float data_w[]; };
layout(binding = 6, scalar) readonly buffer BufS { float data_s[]; };

layout(push_constant) uniform PushConstants {
    uint k_off; uint v_off; uint r_off; uint u_off;
    uint w_off; uint s_off; uint d_off;
    uint hs; uint nh; uint nt; uint n_s;
} p;

shared float sk[MAX_HS];
shared float sr[MAX_HS];
shared float sw[MAX_HS];
shared float su[MAX_HS];

void main() {
    const uint unit = wg_linear();
    if (unit >= p.nh * p.n_s) {
        return;
    }
    const uint h = unit % p.nh;
    const uint seq = unit / p.nh;
    const uint j = gl_LocalInvocationID.x;
    const bool act = j < p.hs;
    const uint c = p.hs * p.nh;
    const uint hh = p.hs * p.hs;
    const uint s0 = seq * hh * p.nh + h * hh;
    float st[MAX_HS];
    [[unroll]] for (uint i = 0u; i < MAX_HS; ++i) {
        st[i] = (act && i < p.hs) ? data_s[p.s_off + s0 + i * p.hs + j] : 0.0;
    }
    if (act) {
        su[j] = data_u[p.u_off + h * p.hs + j];
    }
    const uint per = p.nt / p.n_s;
    for (uint t = seq * per; t < (seq + 1u) * per; ++t) {
        const uint row = t * c + h * p.hs;
        barrier();
        if (act) {
            sk[j] = data_k[p.k_off + row + j];
            sr[j] = data_r[p.r_off + row + j];
            sw[j] = data_w[p.w_off + row + j];
        }
        barrier();
        const float vj = act ? data_v[p.v_off + row + j] : 0.0;
        float y = 0.0;
        [[unroll]] for (uint i = 0u; i < MAX_HS; ++i) {
            if (i < p.hs) {
                const float kv = sk[i] * vj;
                y += (kv * su[i] + st[i]) * sr[i];
                st[i] = st[i] * sw[i] + kv;
            }
        }
        if (act) {
            data_d[p.d_off + row + j] = y;
        }
    }
    if (act) {
        const uint d0 = p.d_off + c * p.nt + s0;
        [[unroll]] for (uint i = 0u; i < MAX_HS; ++i) {
            if (i < p.hs) {
                data_d[d0 + i * p.hs + j] = st[i];
            }
        }
    }
}
