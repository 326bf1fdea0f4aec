#version 450
// MUL_MAT's activations rounded to the weight type's dot-product partner,
// as ggml's CPU backend rounds them before its dot products: d (dense f32,
// a's logical order) holds the values the partner type represents.
//   R_Q8_0: 32-value blocks, d = amax / 127 kept as f16, q = nearest
//           (halves to even) of x * (127 / amax) clamped to [-128, 127].
//   R_Q8_1: the same, and after the values (from element p.b_off of d)
//           one float per block: s - d * sum(q), where s = (amax / 127) *
//           sum(q) kept as f16 is the block sum the CPU's Q4_1 / Q5_1
//           products use in place of the exact one.
//   R_Q8_K: 256-value blocks, iscale = -127 / (the value of largest
//           magnitude, the first on ties), q = min(127, nearest of
//           iscale * x), d = 1 / iscale kept as f32.
//   R_BF16, R_F16: each value rounded to nearest even.
// Divisions and f16 conversions are done exactly in integer arithmetic
// (shader division and conversions need not round correctly); products
// are `precise` so that they are not fused with the additions after them.
// a: f32 rows (nb00 = 1) of a multiple of the block size; p.n is the
// number of blocks. One value per invocation: for the block types, the
// invocations of a block (WG / QB blocks per workgroup, consecutive
// values in neighbouring invocations) find its largest magnitude (and
// the Q8_1 sum) together, in shared memory; maxima and integer sums are
// exact in any order, so the result is the CPU's bit for bit.
#include "common.glsl"

#if defined(R_Q8_0) || defined(R_Q8_1)
#define QB 32u
#define BLOCKS
#elif defined(R_Q8_K)
#define QB 256u
#define BLOCKS
#elif defined(R_BF16) || defined(R_F16)
#define QB 1u
#else
#error "no rounding type defined"
#endif
#define WG 256u

layout(local_size_x = WG) in;

layout(binding = 0, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { float data_d[]; };

#include "pc_4d.glsl"

#include "rounding.glsl"

#if defined(BLOCKS)
shared float s_abs[WG];
#if defined(R_Q8_K)
shared float s_val[WG];
#else
shared int s_sum[WG];
#endif
#endif

void main() {
#if defined(BLOCKS)
    const uint tid = gl_LocalInvocationID.x;
    const uint gi = wg_linear() * WG + tid;
    const uint ib = gi / QB;
    // Invocations past the end take part in the reductions with zeros.
    const bool live = ib < p.n;
    const uint lane = tid % QB;
    const uint first = tid - lane;
    const float x = live ? data_a[a_index(gi)] : 0.0;
    // The CPU's running maximum (`v > amax`) never takes a NaN.
    s_abs[tid] = isnan(x) ? 0.0 : abs(x);
#if defined(R_Q8_K)
    s_val[tid] = x;
#endif
    barrier();
    // The left half of each pair holds the earlier values, so taking the
    // right one only when strictly larger keeps the first on ties.
    for (uint w = QB / 2u; w > 0u; w >>= 1) {
        if (lane < w && s_abs[tid + w] > s_abs[tid]) {
            s_abs[tid] = s_abs[tid + w];
#if defined(R_Q8_K)
            s_val[tid] = s_val[tid + w];
#endif
        }
        barrier();
    }
    const float amax = s_abs[first];
#if defined(R_Q8_K)
    const float vmax = s_val[first];
    float r = 0.0;
    if (amax != 0.0) {
        // iscale = -127 / vmax and d = 1 / iscale, by magnitude and sign.
        const float is = div_rn(127.0, amax);
        const float ds = div_rn(1.0, is);
        const float iscale = vmax > 0.0 ? -is : is;
        const float d = vmax > 0.0 ? -ds : ds;
        precise float t = iscale * x;
        const int q = min(nearest_int(t), 127);
        r = d * float(q);
    }
    if (live) {
        data_d[p.d_off + gi] = r;
    }
#else
    const float d32 = div_rn(amax, 127.0);
    const float d = f16_to_f32(f32_to_f16(d32));
    const float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    precise float t = x * id;
    const int q = clamp(nearest_int(t), -128, 127);
    if (live) {
        data_d[p.d_off + gi] = d * float(q);
    }
#if defined(R_Q8_1)
    s_sum[tid] = q;
    barrier();
    for (uint w = QB / 2u; w > 0u; w >>= 1) {
        if (lane < w) {
            s_sum[tid] += s_sum[tid + w];
        }
        barrier();
    }
    if (live && lane == 0u) {
        const int sum = s_sum[tid];
        precise float s = d32 * float(sum);
        data_d[p.b_off + ib] = f16_to_f32(f32_to_f16(s)) - d * float(sum);
    }
#endif
#endif
#else
    const uint ib = wg_linear() * WG + gl_LocalInvocationID.x;
    if (ib >= p.n) {
        return;
    }
    const uint a0 = a_index(ib);
    const uint d0 = p.d_off + ib;
#if defined(R_BF16)
    // Round to nearest even, NaNs stay quiet NaNs (as ggml).
    const uint u = floatBitsToUint(data_a[a0]);
    const uint h = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 64u : (u + (0x7fffu + ((u >> 16) & 1u))) >> 16;
    data_d[d0] = uintBitsToFloat(h << 16);
#else
    data_d[d0] = f16_to_f32(f32_to_f16(data_a[a0]));
#endif
#endif
}
