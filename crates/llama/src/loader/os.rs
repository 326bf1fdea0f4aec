//! What the loader asks of the operating system: read-ahead advice, NUMA
//! node count, memory locking for `use_mlock` and giving back the pages of
//! the mapping that hold copied tensors.

use super::*;

/// Memory locked for `use_mlock`; unlocked when dropped.
#[cfg_attr(not(unix), allow(dead_code))]
pub struct MemLock {
    addr: usize,
    len: usize,
}

impl std::fmt::Debug for MemLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemLock({} bytes)", self.len)
    }
}

impl Drop for MemLock {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: munlock only changes the paging of the range; a range that
        // is no longer mapped gives an error, which is ignored.
        unsafe {
            libc::munlock(self.addr as *const libc::c_void, self.len);
        }
    }
}

/// Tells the kernel the file is read front to back, which widens its
/// readahead window; a refusal only costs speed.
pub(super) fn advise_sequential(f: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise only reads its integer arguments; the
        // descriptor is open for the duration of the call.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
        if rc != 0 {
            crate::debug!("posix_fadvise(SEQUENTIAL) failed: error {rc}");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = f;
}

/// Number of NUMA nodes of the machine (1 when unknown).
#[cfg_attr(not(unix), allow(dead_code))]
pub(super) fn numa_nodes() -> usize {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_to_string("/sys/devices/system/node/online")
            .map(|s| count_nodes(&s))
            .unwrap_or(1)
            .max(1)
    }
    #[cfg(not(target_os = "linux"))]
    {
        1
    }
}

/// Counts the entries of a kernel node list such as `0-1,4`.
#[cfg_attr(not(unix), allow(dead_code))]
pub(super) fn count_nodes(list: &str) -> usize {
    list.trim()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 1,
            },
            None => 1,
        })
        .sum()
}

/// The soft memlock limit in bytes; `None` when unlimited or unknown.
pub(super) fn memlock_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the limits into `rl`, a valid struct.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
        if rc != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        // rlim_t is not u64 on every platform.
        #[allow(clippy::unnecessary_cast)]
        Some(rl.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The size of a memory page.
#[cfg(unix)]
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf only reads its argument.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Gives back the pages of the file mappings that hold only tensors whose
/// data now lives elsewhere (read into host buffers, repacked, uploaded),
/// as llama.cpp unmaps those fragments: they would otherwise stay resident
/// next to their copy. Pages shared with a tensor used in place are kept.
/// A later read of a released page fetches the file again, so this costs
/// nothing but the page faults of such a read. Each tensor is released as
/// soon as it is copied, so that the mapping and the copies never hold the
/// whole model twice.
#[cfg(unix)]
pub(super) struct Release {
    pub(super) page: usize,
    /// (file, byte range) of every tensor used in place.
    pub(super) in_place: Vec<(usize, (usize, usize))>,
}

#[cfg(unix)]
impl Release {
    pub(super) fn new(reqs: &[WeightRequest], routes: &[Option<Route>]) -> Release {
        let in_place = reqs
            .iter()
            .zip(routes)
            .filter(|(_, route)| matches!(route, Some(Route::Mapped)))
            .map(|(r, _)| (r.file, Self::span(r)))
            .collect();
        Release {
            page: page_size(),
            in_place,
        }
    }

    pub(super) fn span(r: &WeightRequest) -> (usize, usize) {
        (r.file_offset as usize, r.file_offset as usize + r.size)
    }

    /// Releases the mapped pages of `r`, whose data was copied elsewhere
    /// and is not read from the mapping any more.
    pub(super) fn tensor(&self, files: &GgufModel, r: &WeightRequest) {
        let Some(m) = files.files()[r.file].mmap() else {
            return;
        };
        let (lo, hi) = Self::span(r);
        let (start, end) = (lo.next_multiple_of(self.page), hi & !(self.page - 1));
        let shared = self
            .in_place
            .iter()
            .any(|&(f, (a, b))| f == r.file && a < end && start < b);
        if end <= start || end > m.len() || shared {
            return;
        }
        // SAFETY: the pages lie inside the read-only file mapping and hold
        // bytes of this tensor alone, which nothing reads from the mapping
        // any more (its data lives in its own buffer, and no tensor used in
        // place shares them); a later read would fetch the file again.
        let advised = unsafe {
            m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
        };
        if let Err(e) = advised {
            crate::debug!("madvise(DONTNEED) of '{}' failed: {e}", r.desc.name);
        }
    }
}

/// Locks the ranges `(address, bytes)` of `what` in memory, keeping the
/// locks in `locks`. Failing to lock is never an error: it stops at the
/// first range that cannot be locked and prints one warning with the
/// memlock limit.
pub(super) fn lock_ranges(
    what: &str,
    ranges: &[(usize, usize)],
    stats: &mut LoadStats,
    locks: &mut Vec<MemLock>,
) {
    let need: usize = ranges.iter().map(|r| r.1).sum();
    if need == 0 {
        return;
    }
    #[cfg(unix)]
    let failure = {
        let page = page_size();
        let mut locked = 0usize;
        let mut failure = None;
        for &(addr, n) in ranges.iter().filter(|r| r.1 > 0) {
            let start = addr & !(page - 1);
            let len = n + (addr - start);
            // SAFETY: mlock only changes the paging of the range, which is
            // memory of a live buffer or mapping (rounded out to pages).
            let rc = unsafe { libc::mlock(start as *const libc::c_void, len) };
            if rc != 0 {
                failure = Some(std::io::Error::last_os_error().to_string());
                break;
            }
            locks.push(MemLock { addr: start, len });
            locked += n;
        }
        stats.bytes_locked += locked as u64;
        failure.map(|e| (need - locked, e))
    };
    #[cfg(not(unix))]
    let failure = Some((need, "not supported on this platform".to_string()));
    if let Some((missing, why)) = failure {
        stats.bytes_lock_failed += missing as u64;
        let limit = match memlock_limit() {
            Some(l) => format!("the memlock limit (ulimit -l) is {} KiB", l / 1024),
            None => "the memlock limit (ulimit -l) is unlimited".to_string(),
        };
        crate::warn!(
            "warning: use_mlock: failed to lock {} KiB of {what} ({} KiB needed): {why}; \
             {limit}: raise it (e.g. ulimit -l unlimited, or memlock in limits.conf) \
             to keep the model in RAM",
            missing / 1024,
            need / 1024
        );
    }
}
