// The "a" operand of matrix products and row gathers, bound at slot 0, for
// one element type chosen by a define:
//   A_F32, A_F16, A_BF16             -> QK == 1, a_elem(i)
//   A_Q4_0 ... A_Q6_K, A_IQ4_NL,
//   A_IQ4_XS, A_MXFP4                -> QK elements per block,
//                                       dequant4(block, e): elements e..e+3
//                                       (e a multiple of 4) of one block;
//                                       also split in two: dq_scale(block, e),
//                                       the same for the 16 elements from a
//                                       multiple of 16, and dq4(block, e, s).
// Block layouts are ggml's, byte for byte (little-endian, unpadded).
// Multiply-adds are `precise` so that no fused multiply-add changes the
// rounding: dequantized values equal ggml's bit for bit.

#if defined(A_F32)
#define QK 1
layout(binding = 0, scalar) readonly buffer BufA { float data_a[]; };
float a_elem(uint i) { return data_a[i]; }

#elif defined(A_F16)
#define QK 1
layout(binding = 0, scalar) readonly buffer BufA { float16_t data_a[]; };
float a_elem(uint i) { return float(data_a[i]); }

#elif defined(A_BF16)
#define QK 1
layout(binding = 0, scalar) readonly buffer BufA { uint16_t data_a[]; };
float a_elem(uint i) { return uintBitsToFloat(uint(data_a[i]) << 16); }

#else
// Quantized: every block size but MXFP4's (17 bytes, read byte by byte) is
// even, so the same memory is also read as 16-bit words to fetch four
// packed bytes in two loads.
layout(binding = 0, scalar) readonly buffer BufA16 { uint16_t data_a16[]; };
#endif

// Four bytes at even byte offset `off` of block `ib` (BLOCK_BYTES each),
// little-endian in a uint.
#define BYTES4(ib, off) (uint(data_a16[(ib) * (BLOCK_BYTES / 2u) + (off) / 2u]) | \
                         (uint(data_a16[(ib) * (BLOCK_BYTES / 2u) + (off) / 2u + 1u]) << 16))

// The four nibbles of the bytes of v above bit `sh` (0 or 4), as floats.
vec4 nibbles(uint v, uint sh) {
    v >>= sh;
    return vec4(v & 15u, (v >> 8) & 15u, (v >> 16) & 15u, (v >> 24) & 15u);
}

#if defined(A_F32) || defined(A_F16) || defined(A_BF16)
// (declared above)

#elif defined(A_Q4_0) || defined(A_IQ4_NL)
#define QK 32
#define BLOCK_BYTES 18u
struct Block { float16_t d; uint8_t qs[16]; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
vec2 dq_scale(uint ib, uint e) { return vec2(float(data_a[ib].d), 0.0); }
#if defined(A_Q4_0)
vec4 dq4(uint ib, uint e, vec2 s) {
    return (nibbles(BYTES4(ib, 2u + (e & 15u)), (e >> 4) * 4u) - 8.0) * s.x;
}
#endif

#elif defined(A_Q4_1)
#define QK 32
#define BLOCK_BYTES 20u
struct Block { float16_t d; float16_t m; uint8_t qs[16]; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
vec2 dq_scale(uint ib, uint e) { return vec2(float(data_a[ib].d), float(data_a[ib].m)); }
vec4 dq4(uint ib, uint e, vec2 s) {
    const vec4 q = nibbles(BYTES4(ib, 4u + (e & 15u)), (e >> 4) * 4u);
    precise vec4 res = q * s.x + s.y;
    return res;
}

#elif defined(A_Q5_0) || defined(A_Q5_1)
#define QK 32
#if defined(A_Q5_0)
#define BLOCK_BYTES 22u
#define QH_AT 2u
struct Block { float16_t d; uint8_t qh[4]; uint8_t qs[16]; };
#else
#define BLOCK_BYTES 24u
#define QH_AT 4u
struct Block { float16_t d; float16_t m; uint8_t qh[4]; uint8_t qs[16]; };
#endif
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
#if defined(A_Q5_0)
vec2 dq_scale(uint ib, uint e) { return vec2(float(data_a[ib].d), 0.0); }
#else
vec2 dq_scale(uint ib, uint e) { return vec2(float(data_a[ib].d), float(data_a[ib].m)); }
#endif
vec4 dq4(uint ib, uint e, vec2 s) {
    const uint qh = BYTES4(ib, QH_AT) >> e;
    vec4 q = nibbles(BYTES4(ib, QH_AT + 4u + (e & 15u)), (e >> 4) * 4u);
    q += vec4((qh & 1u) << 4, ((qh >> 1) & 1u) << 4, ((qh >> 2) & 1u) << 4, ((qh >> 3) & 1u) << 4);
#if defined(A_Q5_0)
    return (q - 16.0) * s.x;
#else
    precise vec4 res = q * s.x + s.y;
    return res;
#endif
}

#elif defined(A_Q8_0)
#define QK 32
#define BLOCK_BYTES 34u
struct Block { float16_t d; int8_t qs[32]; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
vec2 dq_scale(uint ib, uint e) { return vec2(float(data_a[ib].d), 0.0); }
vec4 dq4(uint ib, uint e, vec2 s) {
    const int v = int(BYTES4(ib, 2u + e));
    return vec4((v << 24) >> 24, (v << 16) >> 24, (v << 8) >> 24, v >> 24) * s.x;
}

#elif defined(A_Q2_K)
#define QK 256
#define BLOCK_BYTES 84u
struct Block { uint8_t scales[16]; uint8_t qs[64]; float16_t d; float16_t dmin; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
// Elements e = 128 n + 32 j + 16 h + l use scale byte 8 n + 2 j + h (scale
// and min nibbles) and bits 2 j of qs[32 n + 16 h + l].
vec2 dq_scale(uint ib, uint e) {
    const uint sc = uint(data_a[ib].scales[e >> 4]);
    return vec2(float(data_a[ib].d) * float(sc & 15u), float(data_a[ib].dmin) * float(sc >> 4));
}
vec4 dq4(uint ib, uint e, vec2 s) {
    const uint n = e >> 7;
    const uint j = (e >> 5) & 3u;
    const uint v = BYTES4(ib, 16u + n * 32u + (e & 31u)) >> (2u * j);
    const vec4 q = vec4(v & 3u, (v >> 8) & 3u, (v >> 16) & 3u, (v >> 24) & 3u);
    precise vec4 res = s.x * q - s.y;
    return res;
}

#elif defined(A_Q3_K)
#define QK 256
#define BLOCK_BYTES 110u
struct Block { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; float16_t d; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
// 16 signed 6-bit scales packed in 12 bytes: low nibbles in bytes 0..7,
// high 2 bits in bytes 8..11. Elements e = 128 n + 32 j + 16 h + l use
// scale 8 n + 2 j + h, bits 2 j of qs[32 n + 16 h + l] and bit 4 n + j of
// hmask[16 h + l].
vec2 dq_scale(uint ib, uint e) {
    const uint is = e >> 4;
    const uint lo = is < 8u ? uint(data_a[ib].scales[is]) & 15u : uint(data_a[ib].scales[is - 8u]) >> 4;
    const uint hi = (uint(data_a[ib].scales[8u + (is & 3u)]) >> (2u * (is >> 2))) & 3u;
    return vec2(float(data_a[ib].d) * (float(lo | (hi << 4)) - 32.0), 0.0);
}
vec4 dq4(uint ib, uint e, vec2 s) {
    const uint n = e >> 7;
    const uint j = (e >> 5) & 3u;
    const uint v = BYTES4(ib, 32u + n * 32u + (e & 31u)) >> (2u * j);
    // A clear high bit subtracts 4.
    const uint hm = ~(BYTES4(ib, e & 31u) >> (n * 4u + j));
    const vec4 q = vec4(v & 3u, (v >> 8) & 3u, (v >> 16) & 3u, (v >> 24) & 3u) -
                   4.0 * vec4(hm & 1u, (hm >> 8) & 1u, (hm >> 16) & 1u, (hm >> 24) & 1u);
    return s.x * q;
}

#elif defined(A_Q4_K) || defined(A_Q5_K)
#define QK 256
#if defined(A_Q4_K)
#define BLOCK_BYTES 144u
#define QS_AT 16u
struct Block { float16_t d; float16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
#else
#define BLOCK_BYTES 176u
#define QS_AT 48u
struct Block { float16_t d; float16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
#endif
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
// Sub-block s = e / 32 (8 of them) has a 6-bit scale and minimum; elements
// e = 64 g + 32 hi + l are nibble hi of qs[32 g + l] (and bit 2 g + hi of
// qh[l] for Q5_K).
vec2 dq_scale(uint ib, uint e) {
    const uint s = e >> 5;
    vec2 sm;
    if (s < 4u) {
        sm = vec2(uint(data_a[ib].scales[s]) & 63u, uint(data_a[ib].scales[s + 4u]) & 63u);
    } else {
        const uint a = uint(data_a[ib].scales[s + 4u]);
        sm = vec2((a & 15u) | ((uint(data_a[ib].scales[s - 4u]) >> 6) << 4),
                  (a >> 4) | ((uint(data_a[ib].scales[s]) >> 6) << 4));
    }
    return vec2(float(data_a[ib].d) * sm.x, float(data_a[ib].dmin) * sm.y);
}
vec4 dq4(uint ib, uint e, vec2 s) {
    const uint g = e >> 6;
    const uint hi = (e >> 5) & 1u;
    const uint l = e & 31u;
    vec4 q = nibbles(BYTES4(ib, QS_AT + g * 32u + l), hi * 4u);
#if defined(A_Q5_K)
    const uint qh = BYTES4(ib, 16u + l) >> (2u * g + hi);
    q += 16.0 * vec4(qh & 1u, (qh >> 8) & 1u, (qh >> 16) & 1u, (qh >> 24) & 1u);
#endif
    precise vec4 res = s.x * q - s.y;
    return res;
}

#elif defined(A_Q6_K)
#define QK 256
#define BLOCK_BYTES 210u
struct Block { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; float16_t d; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
// Elements e = 128 n + 32 quarter + l: low nibble (quarter < 2) or high
// nibble of ql[64 n + 32 (quarter & 1) + l], bits 2 quarter of
// qh[32 n + l], scale 8 n + 2 quarter + l / 16.
vec2 dq_scale(uint ib, uint e) {
    const uint n = e >> 7;
    const uint quarter = (e >> 5) & 3u;
    const uint sc = n * 8u + 2u * quarter + ((e & 31u) >> 4);
    return vec2(float(data_a[ib].d) * float(int(data_a[ib].scales[sc])), 0.0);
}
vec4 dq4(uint ib, uint e, vec2 s) {
    const uint n = e >> 7;
    const uint quarter = (e >> 5) & 3u;
    const uint l = e & 31u;
    const vec4 lo = nibbles(BYTES4(ib, n * 64u + l + 32u * (quarter & 1u)), (quarter >> 1) * 4u);
    const uint hv = BYTES4(ib, 128u + n * 32u + l) >> (2u * quarter);
    const vec4 hi = vec4(hv & 3u, (hv >> 8) & 3u, (hv >> 16) & 3u, (hv >> 24) & 3u);
    return s.x * (lo + 16.0 * hi - 32.0);
}

#elif defined(A_IQ4_XS)
#define QK 256
#define BLOCK_BYTES 136u
struct Block { float16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
// 8 sub-blocks of 32 with 6-bit scales: low 4 bits in scales_l, high 2
// bits in scales_h; element 32 sb + 16 h + j is nibble h of qs[16 sb + j].
vec2 dq_scale(uint ib, uint e) {
    const uint sb = e >> 5;
    const uint ls = ((uint(data_a[ib].scales_l[sb >> 1]) >> (4u * (sb & 1u))) & 15u) |
                    (((uint(data_a[ib].scales_h) >> (2u * sb)) & 3u) << 4);
    return vec2(float(data_a[ib].d) * float(int(ls) - 32), 0.0);
}

#elif defined(A_MXFP4)
#define QK 32
#define BLOCK_BYTES 17u
struct Block { uint8_t e; uint8_t qs[16]; };
layout(binding = 0, scalar) readonly buffer BufA { Block data_a[]; };
// The E8M0 scale, halved as ggml stores the FP4 values doubled: 2^(e - 128)
// (subnormal for e < 2).
vec2 dq_scale(uint ib, uint e) {
    const uint x = uint(data_a[ib].e);
    const uint bits = x < 2u ? (0x00200000u << x) : ((x - 1u) << 23);
    return vec2(uintBitsToFloat(bits), 0.0);
}
// Four bytes of qs from `off` (the block is odd-sized: bytes one by one).
uint qs4(uint ib, uint off) {
    return uint(data_a[ib].qs[off]) | (uint(data_a[ib].qs[off + 1u]) << 8) |
           (uint(data_a[ib].qs[off + 2u]) << 16) | (uint(data_a[ib].qs[off + 3u]) << 24);
}

#else
#error "no A type defined"
#endif

#if defined(A_IQ4_NL) || defined(A_IQ4_XS) || defined(A_MXFP4)
// The 16 levels as signed bytes, four per word: a lookup is a select among
// four words and a shift, not an indexed array (which some compilers turn
// into a chain of branches).
#if defined(A_MXFP4)
// The FP4 (E2M1) values doubled: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives.
const uvec4 KVALUES = uvec4(0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
#else
// IQ4_NL's levels -127, -104, ..., 113.
const uvec4 KVALUES = uvec4(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
#endif
float kvalue(uint i) {
    return float(int(KVALUES[i >> 2] << (24u - 8u * (i & 3u))) >> 24);
}
vec4 dq4(uint ib, uint e, vec2 s) {
#if defined(A_MXFP4)
    const uint v = qs4(ib, e & 15u);
#elif defined(A_IQ4_NL)
    const uint v = BYTES4(ib, 2u + (e & 15u));
#else
    const uint v = BYTES4(ib, 8u + 16u * (e >> 5) + (e & 15u));
#endif
    const uvec4 q = uvec4(nibbles(v, ((e >> 4) & 1u) * 4u));
    return s.x * vec4(kvalue(q.x), kvalue(q.y), kvalue(q.z), kvalue(q.w));
}
#endif

#if QK > 1
vec4 dequant4(uint ib, uint e) {
    return dq4(ib, e, dq_scale(ib, e));
}
#endif
