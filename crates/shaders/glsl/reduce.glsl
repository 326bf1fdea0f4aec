// Workgroup-wide reductions through shared memory; every invocation of the
// workgroup must call them (uniform control flow). WG is the workgroup size,
// a power of two.

shared float red_buf[WG];

float wg_sum(float v) {
    red_buf[gl_LocalInvocationID.x] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (gl_LocalInvocationID.x < s) {
            red_buf[gl_LocalInvocationID.x] += red_buf[gl_LocalInvocationID.x + s];
        }
        barrier();
    }
    const float r = red_buf[0];
    barrier();
    return r;
}

float wg_max(float v) {
    red_buf[gl_LocalInvocationID.x] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (gl_LocalInvocationID.x < s) {
            red_buf[gl_LocalInvocationID.x] = max(red_buf[gl_LocalInvocationID.x], red_buf[gl_LocalInvocationID.x + s]);
        }
        barrier();
    }
    const float r = red_buf[0];
    barrier();
    return r;
}
