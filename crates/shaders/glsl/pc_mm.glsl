// Push constants of the matrix multiplications d = a^T b:
// a [K, M, ne02, ne03] (rows of K elements, quantized or float),
// b [K, N, ne12, ne13] (float rows), d [M, N, ne12, ne13] (f32).
// Row strides and batch strides are in units of a's blocks (or elements)
// and of b's and d's elements. a is broadcast over b's batch: r2 = ne12 / ne02,
// r3 = ne13 / ne03. With Q4_1 / Q5_1 a, b is followed (from element
// sums_off) by one float per 32-value block of b, added times the block's
// min of a: the difference between the Q8_1 block sum the CPU uses and the
// exact one (see round_act.comp).
layout(push_constant) uniform PushConstants {
    uint M;
    uint N;
    uint K;
    uint a_off;
    uint b_off;
    uint d_off;
    uint stride_a;
    uint stride_b;
    uint stride_d;
    uint batch_a2;
    uint batch_a3;
    uint batch_b2;
    uint batch_b3;
    uint batch_d2;
    uint batch_d3;
    uint ne12;
    uint r2;
    uint r3;
    uint n_batch;
    uint tiles_m;
    uint tiles_n;
    uint sums_off;
} p;
