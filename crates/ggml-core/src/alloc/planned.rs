//! Buffers that hold no memory: the stand-ins of a memory plan. A planned
//! buffer has the buffer type and size the real one would have, so that
//! everything that lays tensors out (weights, KV caches, the graph
//! allocator behind a scheduler) runs as for a real load and the sizes it
//! reaches are exactly those a real load allocates; any access to its
//! bytes is an error.

use std::any::Any;
use std::sync::Arc;

use crate::backend::{Buffer, BufferCommon, BufferType, BufferUsage};
use crate::{Error, Result};

/// A buffer of a buffer type and size, without memory.
pub struct PlannedBuffer {
    common: BufferCommon,
}

impl PlannedBuffer {
    /// A planned buffer of `size` bytes of `buft`, holding `usage`.
    pub fn shared(buft: Arc<dyn BufferType>, size: usize, usage: BufferUsage) -> Arc<dyn Buffer> {
        Arc::new(PlannedBuffer {
            common: BufferCommon::new(buft, size, usage),
        })
    }

    fn no_memory(&self, what: &str) -> Error {
        Error::Invalid(format!(
            "{what} a planned {} buffer of {} bytes: it only plans memory and holds none",
            self.common.buft().name(),
            self.common.size()
        ))
    }
}

impl Buffer for PlannedBuffer {
    fn common(&self) -> &BufferCommon {
        &self.common
    }
    fn set_tensor(&self, _offset: usize, _data: &[u8]) -> Result<()> {
        Err(self.no_memory("writing to"))
    }
    fn get_tensor(&self, _offset: usize, _out: &mut [u8]) -> Result<()> {
        Err(self.no_memory("reading from"))
    }
    fn memset_tensor(&self, _offset: usize, _value: u8, _size: usize) -> Result<()> {
        Err(self.no_memory("filling"))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{LinearAlloc, VBuffer};
    use crate::host::{HostBufferType, HOST_ALIGNMENT};
    use crate::{TensorDesc, Type};

    #[test]
    fn planned_layouts_match_real_ones_and_hold_no_memory() {
        let bt: Arc<dyn BufferType> = HostBufferType::new("CPU", HOST_ALIGNMENT, 1 << 20);
        let ts: Vec<TensorDesc> = (0..5)
            .map(|i| TensorDesc::new(format!("t{i}"), Type::F32, &[1000 * (i + 1), 37]))
            .collect();
        let real = LinearAlloc::alloc_tensors(&bt, &ts, BufferUsage::Weights).unwrap();
        let plan = LinearAlloc::plan_tensors(&bt, &ts, BufferUsage::Weights).unwrap();
        let sizes = |v: &[Arc<dyn Buffer>]| v.iter().map(|b| b.size()).collect::<Vec<_>>();
        assert!(real.buffers.len() > 1, "max_size should split the tensors");
        assert_eq!(sizes(&real.buffers), sizes(&plan.buffers));
        let offs = |a: &crate::alloc::LinearAllocation| {
            a.placements.iter().map(|p| p.offset).collect::<Vec<_>>()
        };
        assert_eq!(offs(&real), offs(&plan));
        let b = &plan.buffers[0];
        assert!(b.base().is_none());
        assert_eq!(b.usage(), BufferUsage::Weights);
        let e = b.set_tensor(0, &[1, 2]).unwrap_err().to_string();
        assert!(
            e.contains("planned CPU buffer") && e.contains("holds none"),
            "{e}"
        );
        assert!(b.get_tensor(0, &mut [0u8; 2]).is_err());
        assert!(b.clear(0).is_err());

        let mut v = VBuffer::new(bt.clone(), BufferUsage::Compute);
        v.set_planning(true);
        assert_eq!(v.grow(&[100, 300]).unwrap(), 2);
        assert_eq!(v.grow(&[50, 400]).unwrap(), 1);
        assert_eq!(v.chunk_sizes(), vec![100, 400]);
        assert!(v.chunk(0).unwrap().base().is_none());
        // Beyond the type's max size, planning fails as allocating would.
        assert!(v.grow(&[2 << 20]).is_err());
    }
}
