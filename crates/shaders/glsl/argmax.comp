#version 450
// Index of the largest element of each row of a (the first one on ties),
// one workgroup per row; d is I32.
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(binding = 0, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { int data_d[]; };

#include "pc_4d.glsl"

shared float best_v[WG];
shared uint best_i[WG];

void main() {
    const uint row = wg_linear();
    if (row >= p.n) {
        return;
    }
    const uint tid = gl_LocalInvocationID.x;
    const uint a0 = p.a_off + row * p.nb01;
    float bv = -1.0 / 0.0;
    uint bi = 0xffffffffu;
    for (uint i = tid; i < p.ne00; i += WG) {
        const float x = data_a[a0 + i * p.nb00];
        if (bi == 0xffffffffu || x > bv) {
            bv = x;
            bi = i;
        }
    }
    best_v[tid] = bv;
    best_i[tid] = bi;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            const float ov = best_v[tid + s];
            const uint oi = best_i[tid + s];
            if (oi != 0xffffffffu && (best_i[tid] == 0xffffffffu || ov > best_v[tid] ||
                                      (ov == best_v[tid] && oi < best_i[tid]))) {
                best_v[tid] = ov;
                best_i[tid] = oi;
            }
        }
        barrier();
    }
    if (tid == 0u) {
        data_d[p.d_off + row * p.nb20] = int(best_i[0]);
    }
}
