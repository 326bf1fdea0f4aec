//! Events: a timeline semaphore per event; recording signals its next
//! value, waiting on the same device is a GPU-side wait.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ash::vk;
use ggml_core::Event;

use crate::error::{Result, VkContext};
use crate::logical::DeviceShared;

/// A timeline semaphore, shared by an event and the submissions that wait
/// on it, destroyed with the last of them.
pub(crate) struct Timeline {
    shared: Arc<DeviceShared>,
    pub(crate) sem: vk::Semaphore,
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: the event waited for its last signal and every submission
        // waiting on the semaphore completed (they hold this object).
        unsafe { self.shared.device.destroy_semaphore(self.sem, None) };
    }
}

/// A point in a Vulkan backend's queue.
pub struct VkEvent {
    tl: Arc<Timeline>,
    next: AtomicU64,
    recorded: AtomicU64,
}

impl VkEvent {
    pub(crate) fn new(shared: Arc<DeviceShared>) -> Result<VkEvent> {
        let mut ti = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        // SAFETY: a live device; the semaphore is destroyed in Drop.
        let sem = unsafe {
            shared
                .device
                .create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut ti), None)
        }
        .ctx("vkCreateSemaphore")?;
        Ok(VkEvent {
            tl: Arc::new(Timeline { shared, sem }),
            next: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<DeviceShared> {
        &self.tl.shared
    }

    pub(crate) fn timeline(&self) -> &Arc<Timeline> {
        &self.tl
    }

    /// The value the next recording signals.
    pub(crate) fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(crate) fn set_recorded(&self, v: u64) {
        self.recorded.fetch_max(v, Ordering::SeqCst);
    }

    /// The value of the last recording, if it was ever recorded.
    pub(crate) fn recorded(&self) -> Option<u64> {
        match self.recorded.load(Ordering::SeqCst) {
            0 => None,
            v => Some(v),
        }
    }

    fn wait(&self) -> Result<()> {
        let Some(v) = self.recorded() else {
            return Ok(());
        };
        let sems = [self.tl.sem];
        let values = [v];
        // SAFETY: the semaphore is live; the value was submitted for signalling.
        unsafe {
            self.tl.shared.device.wait_semaphores(
                &vk::SemaphoreWaitInfo::default()
                    .semaphores(&sems)
                    .values(&values),
                u64::MAX,
            )
        }
        .ctx("vkWaitSemaphores")
    }
}

impl Drop for VkEvent {
    fn drop(&mut self) {
        // The semaphore must not be destroyed while a signal is pending.
        if self.wait().is_err() {
            self.tl.shared.wait_idle();
        }
    }
}

impl Event for VkEvent {
    fn synchronize(&self) -> ggml_core::Result<()> {
        Ok(self.wait()?)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
