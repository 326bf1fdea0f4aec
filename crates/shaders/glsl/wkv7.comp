#version 450
// RWKV-7 generalized delta rule (RWKV_WKV7). One workgroup per head h of
// sequence s; invocation i (a value index, i < head size S) keeps row i of
// the head's state, S[i][j] for every key index j, in registers and
// carries it through the sequence's tokens:
//   sa = sum_j a[j] * S[i][j]
//   S[i][j] = S[i][j] * w[j] + v[i] * k[j] + sa * b[j]
//   out[i] = sum_j S[i][j] * r[j]
// The token's r, w, k, a and b rows are shared. Every source is contiguous
// F32: r, w, k, v, a, b [S, H, T], the states [S * S * H, n_s] (element
// j + S i of head h); the result holds the T output rows [S * H], then the
// final states in the states' layout.
// Bindings: 0 r, 1 w, 2 k, 3 result, 4 v, 5 a, 6 b, 7 states.
#include "common.glsl"

#define MAX_HS 128u
layout(local_size_x = 128) in;

layout(binding = 0, scalar) readonly buffer BufR { float data_r[]; };
layout(binding = 1, scalar) readonly buffer BufW { float data_w[]; };
layout(binding = 2, scalar) readonly buffer BufK { float data_k[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };
layout(binding = 4, scalar) readonly buffer BufV { float data_v[]; };
layout(binding = 5, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 6, scalar) readonly buffer BufB { float data_b[]; };
layout(binding = 7, scalar) readonly buffer BufS { float data_s[]; };

layout(push_constant) uniform PushConstants {
    uint r_off; uint w_off; uint k_off; uint v_off;
    uint a_off; uint b_off; uint s_off; uint d_off;
    uint hs; uint nh; uint nt; uint n_s;
} p;

shared float sr[MAX_HS];
shared float sw[MAX_HS];
shared float sk[MAX_HS];
shared float sa_[MAX_HS];
shared float sb[MAX_HS];

void main() {
    const uint unit = wg_linear();
    if (unit >= p.nh * p.n_s) {
        return;
    }
    const uint h = unit % p.nh;
    const uint seq = unit / p.nh;
    const uint i = gl_LocalInvocationID.x;
    const bool act = i < p.hs;
    const uint c = p.hs * p.nh;
    const uint hh = p.hs * p.hs;
    const uint s0 = seq * hh * p.nh + h * hh + i * p.hs;
    float st[MAX_HS];
    [[unroll]] for (uint j = 0u; j < MAX_HS; ++j) {
        st[j] = (act && j < p.hs) ? data_s[p.s_off + s0 + j] : 0.0;
    }
    const uint per = p.nt / p.n_s;
    for (uint t = seq * per; t < (seq + 1u) * per; ++t) {
        const uint row = t * c + h * p.hs;
        barrier();
        if (act) {
            sr[i] = data_r[p.r_off + row + i];
            sw[i] = data_w[p.w_off + row + i];
            sk[i] = data_k[p.k_off + row + i];
            sa_[i] = data_a[p.a_off + row + i];
            sb[i] = data_b[p.b_off + row + i];
        }
        barrier();
        const float vi = act ? data_v[p.v_off + row + i] : 0.0;
        float sa = 0.0;
        [[unroll]] for (uint j = 0u; j < MAX_HS; ++j) {
            if (j < p.hs) {
                sa += sa_[j] * st[j];
            }
        }
        float y = 0.0;
        [[unroll]] for (uint j = 0u; j < MAX_HS; ++j) {
            if (j < p.hs) {
                st[j] = st[j] * sw[j] + vi * sk[j] + sa * sb[j];
                y += st[j] * sr[j];
            }
        }
        if (act) {
            data_d[p.d_off + row + i] = y;
        }
    }
    if (act) {
        const uint d0 = p.d_off + c * p.nt + s0;
        [[unroll]] for (uint j = 0u; j < MAX_HS; ++j) {
            if (j < p.hs) {
                data_d[d0 + j] = st[j];
            }
        }
    }
}
