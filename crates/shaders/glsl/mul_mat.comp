#version 450
// Tiled matrix x matrix: d = a^T b on 64 x 64 output tiles, 256 invocations
// each computing 4 x 4 outputs; a (dequantized to f32) and b are staged
// through shared memory 32 elements of K at a time.
// Defines: an A type (see dequant.glsl); B_F16 for f16 b (else f32).
#include "common.glsl"

#define BM 64u
#define BN 64u
#define BK 32u
#define WG 256u
layout(local_size_x = 256) in;

#include "dequant.glsl"
#if defined(B_F16)
layout(binding = 1, scalar) readonly buffer BufB { float16_t data_b[]; };
#else
layout(binding = 1, scalar) readonly buffer BufB { float data_b[]; };
#endif
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };

#include "pc_mm.glsl"

shared float tile_a[BK][BM + 1u];
shared float tile_b[BK][BN + 1u];
#if defined(A_Q4_1) || defined(A_Q5_1)
// The block's min of a per row and b's block-sum correction per column.
shared float tile_m[BM];
shared float tile_s[BN];
#endif

void main() {
    uint g = wg_linear();
    if (g >= p.tiles_m * p.tiles_n * p.n_batch) {
        return;
    }
    const uint tm = g % p.tiles_m; g /= p.tiles_m;
    const uint tn = g % p.tiles_n;
    const uint batch = g / p.tiles_n;
    const uint i12 = batch % p.ne12;
    const uint i13 = batch / p.ne12;
    const uint m0 = tm * BM;
    const uint n0 = tn * BN;
    const uint a_base = p.a_off + (i12 / p.r2) * p.batch_a2 + (i13 / p.r3) * p.batch_a3;
    const uint b_base = p.b_off + i12 * p.batch_b2 + i13 * p.batch_b3;
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % 16u;   // output rows m0 + tx + 16 i
    const uint ty = tid / 16u;   // output columns n0 + ty + 16 j

    float acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            acc[i][j] = 0.0;
        }
    }

    for (uint k0 = 0u; k0 < p.K; k0 += BK) {
        // a tile: BM rows x BK, as 512 groups of 4 consecutive k, 2 per invocation.
        [[unroll]] for (uint t = 0u; t < 2u; t++) {
            const uint idx = tid + t * WG;
            const uint r = idx / (BK / 4u);
            const uint kk = (idx % (BK / 4u)) * 4u;
            const uint m = m0 + r;
            vec4 v = vec4(0.0);
            if (m < p.M) {
                const uint arow = a_base + m * p.stride_a;
#if QK == 1
                [[unroll]] for (uint q = 0u; q < 4u; q++) {
                    if (k0 + kk + q < p.K) {
                        v[q] = a_elem(arow + k0 + kk + q);
                    }
                }
#else
                if (k0 + kk < p.K) {
                    v = dequant4(arow + (k0 + kk) / QK, (k0 + kk) % QK);
                }
#endif
            }
            tile_a[kk][r] = v.x;
            tile_a[kk + 1u][r] = v.y;
            tile_a[kk + 2u][r] = v.z;
            tile_a[kk + 3u][r] = v.w;
        }
        // b tile: BN columns x BK, 8 elements per invocation.
        [[unroll]] for (uint t = 0u; t < 8u; t++) {
            const uint idx = tid + t * WG;
            const uint c = idx / BK;
            const uint kk = idx % BK;
            const uint n = n0 + c;
            float v = 0.0;
            if (n < p.N && k0 + kk < p.K) {
                v = float(data_b[b_base + n * p.stride_b + k0 + kk]);
            }
            tile_b[kk][c] = v;
        }
#if defined(A_Q4_1) || defined(A_Q5_1)
        // BK is one block of a; b is dense, K / 32 blocks per column.
        if (tid < BM) {
            const uint m = m0 + tid;
            tile_m[tid] = m < p.M ? dq_scale(a_base + m * p.stride_a + k0 / QK, 0u).y : 0.0;
        } else if (tid < BM + BN) {
            const uint n = n0 + tid - BM;
            tile_s[tid - BM] = n < p.N ? data_b[p.sums_off + (b_base - p.b_off + n * p.stride_b) / 32u + k0 / 32u] : 0.0;
        }
#endif
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
            float av[4];
            float bv[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                av[i] = tile_a[kk][tx + 16u * i];
                bv[i] = tile_b[kk][ty + 16u * i];
            }
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                [[unroll]] for (uint j = 0u; j < 4u; j++) {
                    acc[i][j] += av[i] * bv[j];
                }
            }
        }
#if defined(A_Q4_1) || defined(A_Q5_1)
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            [[unroll]] for (uint j = 0u; j < 4u; j++) {
                acc[i][j] += tile_m[tx + 16u * i] * tile_s[ty + 16u * j];
            }
        }
#endif
        barrier();
    }

    const uint d_base = p.d_off + i12 * p.batch_d2 + i13 * p.batch_d3;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        const uint m = m0 + tx + 16u * i;
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            const uint n = n0 + ty + 16u * j;
            if (m < p.M && n < p.N) {
                data_d[d_base + n * p.stride_d + m] = acc[i][j];
            }
        }
    }
}
