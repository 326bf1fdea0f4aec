//! Filling device buffers: the ring of pinned staging buffers that
//! overlaps reading with asynchronous copies, and the synchronous
//! uploader used otherwise.

use super::*;

/// Staging buffers of a ring filled by direct reads: direct I/O has no
/// read-ahead, so half of them are read at once to keep the disk busy
/// (see `direct.rs`) while the other half's copies run.
pub(super) const DIO_STAGING_COUNT: usize = 2 * super::direct::READERS;

/// A ring of pinned staging buffers of one device, each with an event,
/// and the backend that queues the copies out of them.
pub(super) struct Ring {
    pub(super) backend: Box<dyn Backend>,
    pub(super) slots: Vec<Slot>,
    pub(super) next: usize,
    /// Bytes of tensor data a piece holds.
    pub(super) size: usize,
    /// Bytes of each staging buffer: `size` and room for direct reads.
    pub(super) capacity: usize,
}

pub(super) struct Slot {
    pub(super) buffer: Arc<dyn Buffer>,
    pub(super) base: NonNull<u8>,
    pub(super) event: Arc<dyn Event>,
    /// A copy out of the slot was queued after its event was last waited for.
    pub(super) busy: bool,
}

impl Ring {
    /// A ring of `count` staging buffers for pieces of `size` bytes on
    /// `dev`, each with `slack` more bytes (the widening of direct reads),
    /// or why the device cannot have one.
    pub(super) fn new(
        dev: &Arc<dyn Device>,
        size: usize,
        count: usize,
        slack: usize,
    ) -> std::result::Result<Ring, String> {
        let capacity = size + slack;
        let caps = dev.props().caps;
        if !caps.async_ {
            return Err("no asynchronous transfers".into());
        }
        if !caps.events {
            return Err("no events".into());
        }
        let buft = dev
            .host_buffer_type()
            .filter(|_| caps.host_buffer)
            .ok_or("no pinned host buffer type")?;
        let mut slots = Vec::with_capacity(count);
        for _ in 0..count {
            let buffer = buft
                .alloc_buffer(capacity)
                .map_err(|e| format!("pinned staging buffer: {e}"))?;
            let base = buffer
                .base()
                .filter(|_| !buffer.is_read_only())
                .ok_or("the pinned buffer has no host address")?;
            let event = dev.event_new().ok_or("cannot create an event")?;
            slots.push(Slot {
                buffer,
                base,
                event,
                busy: false,
            });
        }
        let backend = dev.init_backend().map_err(|e| e.to_string())?;
        Ok(Ring {
            backend,
            slots,
            next: 0,
            size,
            capacity,
        })
    }

    /// The next staging buffer, once the copy queued out of it last has
    /// completed.
    pub(super) fn acquire(&mut self) -> ggml_core::Result<usize> {
        let k = self.next;
        self.next = (k + 1) % self.slots.len();
        let s = &mut self.slots[k];
        if s.busy {
            s.event.synchronize()?;
            s.busy = false;
        }
        Ok(k)
    }

    /// Staging buffer `k` (from [`Ring::acquire`]).
    pub(super) fn slot_mut(&mut self, k: usize) -> &mut [u8] {
        let s = &self.slots[k];
        debug_assert!(!s.busy);
        // SAFETY: the buffer is pinned host memory of `self.capacity` bytes
        // that only this ring uses; no queued copy reads it (its event was
        // waited for in `acquire`), and the borrow of `self` keeps it
        // exclusive.
        unsafe { std::slice::from_raw_parts_mut(s.base.as_ptr(), self.capacity) }
    }

    /// Staging buffers `ks` (distinct, each from [`Ring::acquire`]) at once,
    /// for reads that fill several of them together.
    pub(super) fn slots_mut(&mut self, ks: &[usize]) -> Vec<&mut [u8]> {
        let mut taken = vec![false; self.slots.len()];
        ks.iter()
            .map(|&k| {
                // Two slices of one buffer would alias: the callers take
                // each buffer once.
                assert!(
                    !std::mem::replace(&mut taken[k], true),
                    "staging buffer {k} taken twice"
                );
                let s = &self.slots[k];
                debug_assert!(!s.busy);
                // SAFETY: as in `slot_mut`; the buffers are distinct
                // (checked above), so the slices do not overlap.
                unsafe { std::slice::from_raw_parts_mut(s.base.as_ptr(), self.capacity) }
            })
            .collect()
    }

    /// Staging buffers that reads fill at once: half the ring, so that
    /// the other half's copies run while they are read.
    pub(super) fn read_depth(&self) -> usize {
        (self.slots.len() / 2).max(1)
    }

    /// Queues the copy of the `len` bytes at `from` in staging buffer `k`
    /// to `dst`, then records the slot's event.
    pub(super) fn submit(
        &mut self,
        k: usize,
        from: usize,
        dst: &Placement,
        len: usize,
    ) -> ggml_core::Result<()> {
        if from.checked_add(len).is_none_or(|e| e > self.capacity) {
            return Err(ggml_core::Error::OutOfBounds {
                what: "staging copy".into(),
                offset: from,
                end: from.saturating_add(len),
                size: self.capacity,
            });
        }
        let src = Placement {
            buffer: self.slots[k].buffer.clone(),
            offset: from,
        };
        if !self.backend.cpy_tensor_async(&src, dst, len)? {
            // The backend cannot copy out of the buffer itself: it takes the
            // bytes during the call instead.
            let base = self.slots[k].base;
            // SAFETY: the `len` bytes at `from` lie inside the staging buffer
            // (checked above) and were just filled; nothing writes them
            // during the call, which copies them before it returns.
            let data = unsafe { std::slice::from_raw_parts(base.as_ptr().add(from), len) };
            self.backend.set_tensor_async(dst, data)?;
        }
        let s = &mut self.slots[k];
        self.backend.event_record(&*s.event)?;
        s.busy = true;
        Ok(())
    }

    /// Waits for every queued copy.
    pub(super) fn finish(&mut self) -> ggml_core::Result<()> {
        self.backend.synchronize()?;
        for s in &mut self.slots {
            s.busy = false;
        }
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Queued copies hold the buffers they use; waiting here makes an
        // early return (an error, a cancel) leave nothing in flight.
        let _ = self.backend.synchronize();
    }
}

/// How a device buffer group is filled.
pub(super) enum Uploader {
    /// `set_tensor`, piece by piece (or the whole tensor at once when
    /// `whole`), from the mapping or a staging vector (`aligned`, made
    /// when first needed, for direct reads straight into it).
    Sync {
        staging: Vec<u8>,
        aligned: Option<super::read::AlignedBuf>,
        whole: bool,
    },
    /// Through a ring of pinned staging buffers.
    Async(Ring),
}

impl Uploader {
    /// How `entry`'s group is filled; `slack`: extra bytes per staging
    /// buffer for direct reads (which also ask for a ring of at least
    /// [`DIO_STAGING_COUNT`] buffers, half of them read at once).
    pub(super) fn new(entry: &BuftEntry, opts: &LoadOptions, slack: usize) -> Uploader {
        let sync = |whole| Uploader::Sync {
            staging: Vec::new(),
            aligned: None,
            whole,
        };
        // A CPU type that is not plain host memory transforms what it
        // stores, and takes whole tensors.
        if entry.dev.kind() == DeviceKind::Cpu && !entry.buft.is_host() {
            return sync(true);
        }
        if !opts.async_upload {
            return sync(false);
        }
        let Some(dev) = owning_device(entry) else {
            return sync(false);
        };
        let count = if slack > 0 {
            opts.staging_count.max(DIO_STAGING_COUNT)
        } else {
            opts.staging_count
        };
        match Ring::new(&dev, opts.staging_size, count, slack) {
            Ok(r) => {
                crate::debug!(
                    "load_tensors: {}: asynchronous uploads through {} pinned buffers of {} KiB",
                    dev.name(),
                    count,
                    opts.staging_size / 1024
                );
                Uploader::Async(r)
            }
            Err(why) => {
                crate::debug!("load_tensors: {}: synchronous uploads: {why}", dev.name());
                sync(false)
            }
        }
    }
}

/// The device whose memory `entry`'s buffer type is.
pub(super) fn owning_device(entry: &BuftEntry) -> Option<Arc<dyn Device>> {
    if entry.dev.buffer_type().name() == entry.buft.name() {
        return Some(entry.dev.clone());
    }
    let name = entry.buft.device_name()?;
    registry::devices().into_iter().find(|d| d.name() == name)
}
