// Quantizing 32 values into one block of data_d (binding 3), as ggml's
// reference quantizers do (round-half-away and truncations included;
// `precise` keeps multiply-adds unfused, as in the reference).
// Defines: D_Q8_0, D_Q4_0, D_Q4_1, D_Q5_0 or D_Q5_1.

#if defined(D_Q8_0)
struct BlockD { float16_t d; int8_t qs[32]; };
#elif defined(D_Q4_0)
struct BlockD { float16_t d; uint8_t qs[16]; };
#elif defined(D_Q4_1)
struct BlockD { float16_t d; float16_t m; uint8_t qs[16]; };
#elif defined(D_Q5_0)
struct BlockD { float16_t d; uint8_t qh[4]; uint8_t qs[16]; };
#elif defined(D_Q5_1)
struct BlockD { float16_t d; float16_t m; uint8_t qh[4]; uint8_t qs[16]; };
#else
#error "no D type defined"
#endif

layout(binding = 3, scalar) writeonly buffer BufD { BlockD data_d[]; };

// C's roundf: halves away from zero.
float round_away(float v) {
    return sign(v) * floor(abs(v) + 0.5);
}

void quantize_block(const float x[32], uint ib) {
#if defined(D_Q8_0)
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        amax = max(amax, abs(x[j]));
    }
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    data_d[ib].d = float16_t(d);
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        data_d[ib].qs[j] = int8_t(int(round_away(x[j] * id)));
    }
#elif defined(D_Q4_0) || defined(D_Q5_0)
    // The value of largest magnitude, the first one on ties.
    float amax = 0.0;
    float vmax = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        if (amax < abs(x[j])) {
            amax = abs(x[j]);
            vmax = x[j];
        }
    }
#if defined(D_Q4_0)
    const float d = vmax / -8.0;
#else
    const float d = vmax / -16.0;
    uint qh = 0u;
#endif
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    data_d[ib].d = float16_t(d);
    [[unroll]] for (uint j = 0u; j < 16u; j++) {
#if defined(D_Q4_0)
        precise float t0 = x[j] * id + 8.5;
        precise float t1 = x[j + 16u] * id + 8.5;
        const uint q0 = uint(min(15, int(t0)));
        const uint q1 = uint(min(15, int(t1)));
#else
        precise float t0 = x[j] * id + 16.5;
        precise float t1 = x[j + 16u] * id + 16.5;
        const uint q0 = uint(min(31, int(t0)));
        const uint q1 = uint(min(31, int(t1)));
        qh |= ((q0 >> 4) & 1u) << j;
        qh |= ((q1 >> 4) & 1u) << (j + 16u);
#endif
        data_d[ib].qs[j] = uint8_t((q0 & 15u) | ((q1 & 15u) << 4));
    }
#if defined(D_Q5_0)
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        data_d[ib].qh[k] = uint8_t((qh >> (8u * k)) & 255u);
    }
#endif
#else
    // Q4_1, Q5_1: scale and minimum.
    float vmin = x[0];
    float vmax = x[0];
    [[unroll]] for (uint j = 1u; j < 32u; j++) {
        vmin = min(vmin, x[j]);
        vmax = max(vmax, x[j]);
    }
#if defined(D_Q4_1)
    const float d = (vmax - vmin) / 15.0;
#else
    const float d = (vmax - vmin) / 31.0;
    uint qh = 0u;
#endif
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    data_d[ib].d = float16_t(d);
    data_d[ib].m = float16_t(vmin);
    [[unroll]] for (uint j = 0u; j < 16u; j++) {
#if defined(D_Q4_1)
        precise float t0 = (x[j] - vmin) * id + 0.5;
        precise float t1 = (x[j + 16u] - vmin) * id + 0.5;
        const uint q0 = uint(min(15, int(t0)));
        const uint q1 = uint(min(15, int(t1)));
#else
        precise float t0 = (x[j] - vmin) * id + 0.5;
        precise float t1 = (x[j + 16u] - vmin) * id + 0.5;
        const uint q0 = uint(int(t0));
        const uint q1 = uint(int(t1));
        qh |= ((q0 >> 4) & 1u) << j;
        qh |= ((q1 >> 4) & 1u) << (j + 16u);
#endif
        data_d[ib].qs[j] = uint8_t((q0 & 15u) | ((q1 & 15u) << 4));
    }
#if defined(D_Q5_1)
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        data_d[ib].qh[k] = uint8_t((qh >> (8u * k)) & 255u);
    }
#endif
#endif
}
