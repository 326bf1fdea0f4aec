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

// a / b rounded to nearest even, for positive finite a and b; by long
// division of the significands when both and the quotient are normal
// (else the hardware division, for extreme scales only).
float div_rn(float a, float b) {
    const uint ua = floatBitsToUint(a);
    const uint ub = floatBitsToUint(b);
    const uint ea = ua >> 23;
    const uint eb = ub >> 23;
    uint ma = (ua & 0x7fffffu) | 0x800000u;
    const uint mb = (ub & 0x7fffffu) | 0x800000u;
    int e = int(ea) - int(eb);
    if (ma < mb) {
        ma <<= 1;
        e -= 1;
    }
    if (ea == 0u || ea >= 255u || eb == 0u || eb >= 255u || e + 127 < 1 || e + 127 > 254) {
        return a / b;
    }
    // ma / mb is in [1, 2): 24 bits of it and a guard bit; the remainder
    // tells whether anything is left beyond them.
    uint q = 0u;
    uint r = ma;
    for (uint i = 0u; i < 25u; i++) {
        q <<= 1;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1;
    }
    uint m = q >> 1;
    if ((q & 1u) != 0u && (r != 0u || (m & 1u) != 0u)) {
        m += 1u;
    }
    if (m == 0x1000000u) {
        m >>= 1;
        e += 1;
        if (e + 127 > 254) {
            return a / b;
        }
    }
    return uintBitsToFloat((uint(e + 127) << 23) | (m & 0x7fffffu));
}

// ggml's nearest_int: halves to even through the 1.5 * 2^23 trick (its
// result for non-finite x included).
int nearest_int(float x) {
    precise float v = x + 12582912.0;
    return (floatBitsToInt(v) & 0x7fffff) - 0x400000;
}

#if defined(R_Q8_0) || defined(R_Q8_1) || defined(R_F16)
// f32 to f16 bits, rounded to nearest even (NaNs stay quiet NaNs).
uint f32_to_f16(float f) {
    const uint x = floatBitsToUint(f);
    const uint s = (x >> 16) & 0x8000u;
    const uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        return s | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u);
    }
    if (ax >= 0x477ff000u) {
        // At or past halfway between 65504 and 65536.
        return s | 0x7c00u;
    }
    uint q;
    uint rem;
    uint half_ulp;
    if (ax < 0x38800000u) {
        // Below 2^-14: a subnormal f16 (or zero) in units of 2^-24.
        if (ax < 0x33000000u) {
            return s;
        }
        const uint m = (ax & 0x7fffffu) | 0x800000u;
        const uint shift = 126u - (ax >> 23);
        q = m >> shift;
        rem = m & ((1u << shift) - 1u);
        half_ulp = 1u << (shift - 1u);
    } else {
        const uint r = ax - 0x38000000u;
        q = r >> 13;
        rem = r & 0x1fffu;
        half_ulp = 0x1000u;
    }
    if (rem > half_ulp || (rem == half_ulp && (q & 1u) != 0u)) {
        q += 1u;
    }
    return s | q;
}

// f16 bits to f32 (exact).
float f16_to_f32(uint h) {
    const uint e = (h >> 10) & 0x1fu;
    const uint m = h & 0x3ffu;
    float v;
    if (e == 0u) {
        v = float(m) * 5.9604644775390625e-8;
    } else if (e == 31u) {
        v = uintBitsToFloat(0x7f800000u | (m << 13));
    } else {
        v = uintBitsToFloat(((e + 112u) << 23) | (m << 13));
    }
    return (h & 0x8000u) != 0u ? -v : v;
}
#endif

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
