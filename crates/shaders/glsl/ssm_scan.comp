#version 450
// Selective scan of Mamba-1 and Mamba-2 (SSM_SCAN). One workgroup per
// state row (row i of head h of sequence s); its invocations share the
// row's d_state elements (at most SSM_MAX_PER * WG of them) and carry them
// through the sequence's tokens in registers:
//   dt' = softplus(dt[h, t, s]);  dA = exp(dt' * A[k or 0, h])
//   S[k] = S[k] * dA + B[k, g, t, s] * x[i, h, t, s] * dt'
//   y[i, h, t, s] = sum_k S[k] * C[k, g, t, s]
// starting from state slot ids[s] of the cache, with g = h / (n_head /
// n_group). The result holds y [head_dim, n_head, n_t, n_s], then the final
// states [d_state, head_dim, n_head, n_s]. Strides are in elements;
// element strides of x, dt, A, B, C and ids are 1.
// Bindings: 0 states, 1 x, 2 dt, 3 result, 4 A, 5 B, 6 C, 7 ids.
#include "common.glsl"

#define WG 32u
#define SSM_MAX_PER 8u
layout(local_size_x = 32) in;

layout(binding = 0, scalar) readonly buffer BufS { float data_s[]; };
layout(binding = 1, scalar) readonly buffer BufX { float data_x[]; };
layout(binding = 2, scalar) readonly buffer BufDt { float data_dt[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };
layout(binding = 4, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 5, scalar) readonly buffer BufB { float data_b[]; };
layout(binding = 6, scalar) readonly buffer BufC { float data_c[]; };
layout(binding = 7, scalar) readonly buffer BufIds { int data_ids[]; };

layout(push_constant) uniform PushConstants {
    uint s_off; uint x_off; uint dt_off; uint a_off;
    uint b_off; uint c_off; uint ids_off; uint d_off;
    uint d_state; uint head_dim; uint n_head; uint n_group;
    uint n_t; uint n_s; uint n_slots; uint a_ne0;
    uint s_nb1; uint s_nb2; uint s_nb3;
    uint x_nb1; uint x_nb2; uint x_nb3;
    uint dt_nb1; uint dt_nb2;
    uint a_nb1;
    uint b_nb1; uint b_nb2; uint b_nb3;
    uint c_nb1; uint c_nb2; uint c_nb3;
} p;

#include "reduce.glsl"

float softplus(float x) {
    return x > 20.0 ? x : log(1.0 + exp(x));
}

void main() {
    uint row = wg_linear();
    if (row >= p.head_dim * p.n_head * p.n_s) {
        return;
    }
    const uint tid = gl_LocalInvocationID.x;
    const uint i = row % p.head_dim; row /= p.head_dim;
    const uint h = row % p.n_head;
    const uint s = row / p.n_head;
    const uint g = h / (p.n_head / p.n_group);
    const int slot = data_ids[p.ids_off + s];
    // A slot outside the cache (which the CPU reports as an error) starts
    // from zeros here rather than reading outside the binding.
    const bool valid = slot >= 0 && uint(slot) < p.n_slots;
    const uint s0 = p.s_off + i * p.s_nb1 + h * p.s_nb2 + (valid ? uint(slot) : 0u) * p.s_nb3;

    float st[SSM_MAX_PER];
    [[unroll]] for (uint j = 0u; j < SSM_MAX_PER; ++j) {
        const uint k = tid + j * WG;
        st[j] = (valid && k < p.d_state) ? data_s[s0 + k] : 0.0;
    }
    const uint y_len = p.head_dim * p.n_head * p.n_t * p.n_s;
    for (uint t = 0u; t < p.n_t; ++t) {
        const float dt_sp = softplus(data_dt[p.dt_off + h + t * p.dt_nb1 + s * p.dt_nb2]);
        const float x_dt = data_x[p.x_off + i + h * p.x_nb1 + t * p.x_nb2 + s * p.x_nb3] * dt_sp;
        const uint b0 = p.b_off + g * p.b_nb1 + t * p.b_nb2 + s * p.b_nb3;
        const uint c0 = p.c_off + g * p.c_nb1 + t * p.c_nb2 + s * p.c_nb3;
        const uint a0 = p.a_off + h * p.a_nb1;
        const float da_head = exp(dt_sp * data_a[a0]);
        float part = 0.0;
        [[unroll]] for (uint j = 0u; j < SSM_MAX_PER; ++j) {
            const uint k = tid + j * WG;
            if (k < p.d_state) {
                const float da = p.a_ne0 == 1u ? da_head : exp(dt_sp * data_a[a0 + k]);
                st[j] = st[j] * da + data_b[b0 + k] * x_dt;
                part += st[j] * data_c[c0 + k];
            }
        }
        const float y = wg_sum(part);
        if (tid == 0u) {
            data_d[p.d_off + i + p.head_dim * (h + p.n_head * (t + p.n_t * s))] = y;
        }
    }
    const uint d0 = p.d_off + y_len + p.d_state * (i + p.head_dim * (h + p.n_head * s));
    [[unroll]] for (uint j = 0u; j < SSM_MAX_PER; ++j) {
        const uint k = tid + j * WG;
        if (k < p.d_state) {
            data_d[d0 + k] = st[j];
        }
    }
}
