// Exact rounding helpers of the activation roundings (round_act.comp and
// the fused matrix x vector products): correctly rounded division, ggml's
// nearest_int, and f32 <-> f16 conversions done in integer arithmetic
// (shader division and conversions need not round correctly).

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
