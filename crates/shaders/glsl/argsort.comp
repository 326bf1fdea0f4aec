#version 450
// Indices (I32) that sort each row of a (f32), one workgroup per row: a
// bitonic sort in shared memory of (value, index) keys, so that equal
// values keep index order in both directions, as the CPU's stable sort.
// Rows of at most MAX_COLS values; param0 is 0 for ascending, 1 for
// descending order; ne20 (d's row length) equals ne00.
#include "common.glsl"

#define MAX_COLS 1024u
#define WG 256u
layout(local_size_x = 256) in;

layout(binding = 0, scalar) readonly buffer BufA { float data_a[]; };
layout(binding = 3, scalar) writeonly buffer BufD { int data_d[]; };

#include "pc_4d.glsl"

shared float key_v[MAX_COLS];
shared uint key_i[MAX_COLS];

// True when (va, ia) must come after (vb, ib). -0 and +0 compare equal;
// padding (index >= n) goes last.
bool after(float va, uint ia, float vb, uint ib, bool desc) {
    const uint n = p.ne00;
    if (ia >= n || ib >= n) {
        return ia >= n && (ib < n || ia > ib);
    }
    if (va != vb) {
        return desc ? va < vb : va > vb;
    }
    return ia > ib;
}

void main() {
    uint row = wg_linear();
    if (row >= p.n) {
        return;
    }
    const uint tid = gl_LocalInvocationID.x;
    const uint i1 = row % p.ne01; row /= p.ne01;
    const uint i2 = row % p.ne02;
    const uint i3 = row / p.ne02;
    const uint a0 = p.a_off + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03;
    const bool desc = p.param0 != 0.0;
    uint padded = 1u;
    while (padded < p.ne00) {
        padded <<= 1;
    }
    for (uint i = tid; i < padded; i += WG) {
        key_v[i] = i < p.ne00 ? data_a[a0 + i * p.nb00] : 0.0;
        key_i[i] = i;
    }
    barrier();
    for (uint k = 2u; k <= padded; k <<= 1) {
        for (uint j = k >> 1; j > 0u; j >>= 1) {
            for (uint i = tid; i < padded; i += WG) {
                const uint l = i ^ j;
                if (l > i) {
                    const bool up = (i & k) == 0u;
                    const bool swap = up ? after(key_v[i], key_i[i], key_v[l], key_i[l], desc)
                                         : after(key_v[l], key_i[l], key_v[i], key_i[i], desc);
                    if (swap) {
                        const float tv = key_v[i];
                        const uint ti = key_i[i];
                        key_v[i] = key_v[l];
                        key_i[i] = key_i[l];
                        key_v[l] = tv;
                        key_i[l] = ti;
                    }
                }
            }
            barrier();
        }
    }
    const uint d0 = p.d_off + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23;
    for (uint i = tid; i < p.ne00; i += WG) {
        data_d[d0 + i * p.nb20] = int(key_i[i]);
    }
}
