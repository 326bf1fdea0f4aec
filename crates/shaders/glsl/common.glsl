// Shared declarations of every compute shader: storage extensions and the
// linear workgroup index.
//
// Tensors are bound as storage-buffer windows that start at an aligned offset
// at or before the tensor; push constants carry each tensor's first element
// inside its window, its sizes (ne) and its strides (nb) in elements, in
// ggml's order (dimension 0 innermost).
//
// Binding slots: 0 = src0, 1 = src1, 2 = src2, 3 = dst, 4 = src3.

#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_control_flow_attributes : enable

// Large grids are split over x, y and z by the host (each at most 65535
// workgroups); shaders see one linear workgroup index.
uint wg_linear() {
    return gl_WorkGroupID.x + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
}
