// Push constants of the element-wise ops: up to three tensors a, b, d with
// their sizes and strides (in elements), first-element offsets, a count of
// work items and two float parameters. 120 bytes.
layout(push_constant) uniform PushConstants {
    uint n;
    uint a_off;
    uint b_off;
    uint d_off;
    uint ne00; uint ne01; uint ne02; uint ne03;
    uint nb00; uint nb01; uint nb02; uint nb03;
    uint ne10; uint ne11; uint ne12; uint ne13;
    uint nb10; uint nb11; uint nb12; uint nb13;
    uint ne20; uint ne21; uint ne22; uint ne23;
    uint nb20; uint nb21; uint nb22; uint nb23;
    float param0;
    float param1;
} p;

// Offset of linear element i (in a's logical order) inside a.
uint a_index(uint i) {
    uint i0 = i % p.ne00; i /= p.ne00;
    uint i1 = i % p.ne01; i /= p.ne01;
    uint i2 = i % p.ne02; uint i3 = i / p.ne02;
    return p.a_off + i0 * p.nb00 + i1 * p.nb01 + i2 * p.nb02 + i3 * p.nb03;
}

// Offset of linear element i (in d's logical order) inside d.
uint d_index(uint i) {
    uint i0 = i % p.ne20; i /= p.ne20;
    uint i1 = i % p.ne21; i /= p.ne21;
    uint i2 = i % p.ne22; uint i3 = i / p.ne22;
    return p.d_off + i0 * p.nb20 + i1 * p.nb21 + i2 * p.nb22 + i3 * p.nb23;
}
