//! The linear allocator: buffers split at the buffer type's max size,
//! aligned offsets, oversize tensors reported.

use std::sync::Arc;

use ggml_core::alloc::LinearAlloc;
use ggml_core::host::HostBufferType;
use ggml_core::{BufferType, BufferUsage, TensorDesc, Type};

fn f32s(name: &str, n: usize) -> TensorDesc {
    TensorDesc::new(name, Type::F32, &[n])
}

#[test]
fn opens_a_new_buffer_at_max_size() {
    let host = HostBufferType::new("CPU", 64, 1024);
    let bt: Arc<dyn BufferType> = host.clone();
    // 400 B (padded to 448) twice fill 896 of 1024 bytes; 200 B (256 padded)
    // would make 1152, so it opens a second buffer, which the last 40 B join.
    let tensors = vec![f32s("a", 100), f32s("b", 100), f32s("c", 50), f32s("d", 10)];
    let plan = LinearAlloc::plan(&*bt, &tensors).unwrap();
    assert_eq!(plan.buffer_sizes, vec![896, 320]);
    let slots: Vec<(usize, usize)> = plan.slots.iter().map(|s| (s.buffer, s.offset)).collect();
    assert_eq!(slots, vec![(0, 0), (0, 448), (1, 0), (1, 256)]);
    assert_eq!(host.n_allocs(), 0, "planning allocates nothing");

    let a = LinearAlloc::alloc_tensors(&bt, &tensors, BufferUsage::Weights).unwrap();
    assert_eq!(host.n_allocs(), 2);
    assert_eq!(a.buffers.len(), 2);
    for (p, t) in a.placements.iter().zip(&tensors) {
        assert_eq!(p.offset % 64, 0);
        assert!(p.offset + t.nbytes() <= p.buffer.size());
        assert_eq!(p.buffer.usage(), BufferUsage::Weights);
    }
    // data written through one placement is read back there
    let p = &a.placements[3];
    p.buffer.set_tensor(p.offset, &[7u8; 40]).unwrap();
    let mut out = [0u8; 40];
    p.buffer.get_tensor(p.offset, &mut out).unwrap();
    assert_eq!(out, [7u8; 40]);
}

#[test]
fn every_buffer_stays_within_max_size() {
    let host = HostBufferType::new("CPU", 32, 4096);
    let bt: Arc<dyn BufferType> = host.clone();
    let tensors: Vec<TensorDesc> = (0..200)
        .map(|i| f32s(&format!("t{i}"), 1 + (i * 37) % 1000))
        .collect();
    let plan = LinearAlloc::plan(&*bt, &tensors).unwrap();
    assert!(plan.buffer_sizes.iter().all(|&s| s <= 4096));
    // greedy: a buffer is closed only when the next tensor does not fit
    for w in plan.slots.windows(2) {
        if w[1].buffer != w[0].buffer {
            let used = plan.buffer_sizes[w[0].buffer];
            assert!(used + w[1].size.next_multiple_of(32) > 4096);
        }
    }
    let total: usize = tensors
        .iter()
        .map(|t| t.nbytes().next_multiple_of(32))
        .sum();
    assert_eq!(plan.total_size(), total);
    let a = LinearAlloc::alloc_tensors(&bt, &tensors, BufferUsage::Any).unwrap();
    assert_eq!(a.buffers.len(), plan.buffer_sizes.len());
    assert_eq!(host.n_allocs(), plan.buffer_sizes.len());
}

#[test]
fn oversize_tensor_is_an_error_naming_it() {
    let bt: Arc<dyn BufferType> = HostBufferType::new("CPU", 64, 1024);
    let tensors = vec![f32s("small", 10), f32s("blk.0.ffn_up.weight", 300)];
    let e = LinearAlloc::plan(&*bt, &tensors).unwrap_err().to_string();
    assert!(
        e.contains("blk.0.ffn_up.weight") && e.contains("1200") && e.contains("1024"),
        "{e}"
    );
    assert!(LinearAlloc::alloc_tensors(&bt, &tensors, BufferUsage::Weights).is_err());
}

#[test]
fn empty_set_allocates_nothing() {
    let host = HostBufferType::new("CPU", 64, 1024);
    let bt: Arc<dyn BufferType> = host.clone();
    let a = LinearAlloc::alloc_tensors(&bt, &[], BufferUsage::Weights).unwrap();
    assert!(a.buffers.is_empty() && a.placements.is_empty());
    assert_eq!(host.n_allocs(), 0);
}

#[test]
fn single_buffer_allocator_fills_in_order() {
    let bt: Arc<dyn BufferType> = HostBufferType::new("CPU", 16, usize::MAX);
    let mut la = LinearAlloc::new(bt.alloc_buffer(100).unwrap());
    let p0 = la.alloc(&f32s("a", 3)).unwrap();
    let p1 = la.alloc(&f32s("b", 3)).unwrap();
    assert_eq!((p0.offset, p1.offset), (0, 16));
    assert!(la.alloc(&f32s("c", 30)).is_err());
    let p2 = la.alloc(&f32s("d", 4)).unwrap();
    assert_eq!(p2.offset, 32);
}
