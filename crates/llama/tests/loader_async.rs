//! The loader's paths on a GPU: uploads through the pinned staging ring
//! (asynchronous) and with `set_tensor` (synchronous), with mmap on and off,
//! read back byte for byte; pieces of tensors larger than a staging buffer;
//! cancel in the middle of an upload; check_tensors ordering; use_mlock
//! under a tiny memlock limit.
//!
//! The GPU tests need a Vulkan device (lavapipe counts with
//! `GGML_VK_ALLOW_CPU_DEVICES=1`); without one they print "skipped: no
//! Vulkan device", or fail with `REQUIRE_VULKAN=1`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{fixtures, scratch};
use ggml_core::{registry, Device, DeviceKind};
use gguf::{GgufFile, GgufModel};
use llama::loader::{load_weights_with, LoadOptions, LoadedWeights, WeightRequest};
use llama::{LlamaError, LoadMode, Model, ModelParams, TensorKind};

/// The first Vulkan device, or `None` after printing why (a failure with
/// `REQUIRE_VULKAN=1`).
fn vulkan() -> Option<Arc<dyn Device>> {
    llama::backend_init();
    let dev = registry::devices()
        .into_iter()
        .find(|d| matches!(d.kind(), DeviceKind::Gpu | DeviceKind::IGpu));
    if dev.is_none() {
        assert!(
            std::env::var("REQUIRE_VULKAN").map_or(true, |v| v != "1"),
            "REQUIRE_VULKAN=1 but there is no Vulkan device"
        );
        eprintln!("skipped: no Vulkan device");
    }
    dev
}

/// Every fixture model, the first file of a split only.
fn models(fx: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fx.join("models"))
        .expect("fixture models")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.ends_with(".gguf") && (!n.contains("-split-") || n.contains("-00001-of-"))
        })
        // Fixtures of architectures or modes this crate does not load yet
        // (it says so with a clear error) are left to their own tests.
        .filter(|p| {
            let f = GgufModel::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let arch = f.metadata().get_str("general.architecture").unwrap_or("");
            let plan = ModelParams {
                dry_run: true,
                ..ModelParams::default()
            };
            llama::Arch::from_name(arch).is_ok()
                && !matches!(Model::load(p, &plan), Err(LlamaError::NotSupported(_)))
        })
        .collect();
    v.sort();
    assert!(v.len() >= 2, "fixture models that load: {v:?}");
    v
}

/// The bytes of tensor `name` in the files (the embeddings for a tied output).
fn file_bytes<'a>(files: &'a GgufModel, name: &str) -> &'a [u8] {
    let (fi, info) = files
        .tensor(name)
        .or_else(|| (name == "output.weight").then(|| files.tensor("token_embd.weight"))?)
        .unwrap_or_else(|| panic!("tensor {name} not in the file"));
    let f = &files.files()[fi];
    let start = f.tensor_file_offset(info) as usize;
    &f.mmap().expect("mapped")[start..start + info.size as usize]
}

/// Asynchronous uploads through `staging_count` staging buffers of 4 KiB,
/// in pieces of 4 KiB: every tensor but the smallest takes several.
fn small_pieces(staging_count: usize) -> LoadOptions {
    LoadOptions {
        staging_size: 4096,
        staging_count,
        piece_size: 4096,
        async_upload: true,
        ..LoadOptions::default()
    }
}

/// Reads every weight of `m` back and compares it with the file.
fn assert_weights_match(m: &Model, files: &GgufModel, what: &str) {
    let w = m.weights().expect("weights");
    let mut n = 0;
    for spec in m.arch.tensors() {
        let layers: Vec<Option<usize>> = if spec.per_layer() {
            (0..m.hparams.n_layer).map(Some).collect()
        } else {
            vec![None]
        };
        for il in layers {
            let weight = match (spec.kind, il) {
                (k, Some(i)) => w.layers[i].get(k),
                (TensorKind::TokenEmbd, None) => Some(&w.tok_embd),
                (TensorKind::OutputNorm, None) => Some(&w.output_norm),
                (TensorKind::Output, None) => Some(&w.output),
                (TensorKind::RopeFreqs, None) => w.rope_freqs.as_ref(),
                _ => None,
            };
            let Some(weight) = weight else { continue };
            let name = spec.kind.name(il);
            let want = file_bytes(files, &name);
            let mut got = vec![0u8; want.len()];
            weight
                .at
                .buffer
                .get_tensor(weight.at.offset, &mut got)
                .unwrap_or_else(|e| panic!("{what}: reading {name} back: {e}"));
            assert!(got == want, "{what}: {name} differs from the file");
            n += 1;
        }
    }
    assert!(n > 0, "{what}: no weights compared");
}

/// Compares every loaded weight with the file.
fn assert_loaded_match(files: &GgufModel, reqs: &[WeightRequest], lw: &LoadedWeights, what: &str) {
    for (r, w) in reqs.iter().zip(&lw.placements) {
        let want = file_bytes(files, &r.desc.name);
        let mut got = vec![0u8; want.len()];
        w.at.buffer.get_tensor(w.at.offset, &mut got).unwrap();
        assert!(got == want, "{what}: {} differs from the file", r.desc.name);
    }
}

fn gpu_params(use_mmap: bool) -> ModelParams {
    ModelParams {
        n_gpu_layers: 99,
        load_mode: LoadMode::from_flags(use_mmap, false),
        ..ModelParams::default()
    }
}

#[test]
fn fixtures_load_on_the_gpu_and_read_back_equal() {
    let Some(fx) = fixtures() else { return };
    let Some(_dev) = vulkan() else { return };
    for path in models(&fx) {
        let files = GgufModel::open(&path).unwrap();
        for use_mmap in [true, false] {
            let what = format!("{} (mmap {use_mmap})", path.display());
            let m =
                Model::load(&path, &gpu_params(use_mmap)).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(m.stats.bytes_uploaded > 0, "{what}: nothing uploaded");
            assert_eq!(
                m.stats.bytes_uploaded_async, m.stats.bytes_uploaded,
                "{what}: every upload should go through the staging ring"
            );
            assert_weights_match(&m, &files, &what);
        }
    }
}

#[test]
fn staging_ring_uploads_tensors_larger_than_a_staging_buffer() {
    let Some(fx) = fixtures() else { return };
    let Some(dev) = vulkan() else { return };
    for name in [
        "stories260K.gguf",
        "tiny-q4_0.gguf",
        "tiny-q6_k.gguf",
        "tiny-q8_0-split-00001-of-00003.gguf",
    ] {
        let path = fx.join("models").join(name);
        let files = GgufModel::open(&path).unwrap();
        let reqs = WeightRequest::all_to(&dev, &files);
        let total: u64 = reqs.iter().map(|r| r.size as u64).sum();
        assert!(
            reqs.iter().any(|r| r.size > 3 * 4096),
            "{name}: no large tensor"
        );
        for (load_mode, async_upload, check_tensors) in [
            (LoadMode::Mmap, true, false),
            (LoadMode::None, true, true),
            (LoadMode::Mmap, false, true),
            (LoadMode::None, false, false),
            (LoadMode::Dio, true, false),
            (LoadMode::Dio, true, true),
            (LoadMode::Dio, false, true),
        ] {
            let what = format!("{name} {load_mode} async {async_upload}");
            let params = ModelParams {
                load_mode,
                check_tensors,
                ..ModelParams::default()
            };
            let opts = LoadOptions {
                async_upload,
                ..small_pieces(3)
            };
            let lw = load_weights_with(&files, &reqs, &params, &opts)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(lw.stats.bytes_uploaded, total, "{what}");
            let want_async = if async_upload { total } else { 0 };
            assert_eq!(lw.stats.bytes_uploaded_async, want_async, "{what}");
            assert_loaded_match(&files, &reqs, &lw, &what);
        }
    }
}

#[test]
fn progress_moves_within_a_tensor_and_cancel_stops_an_upload() {
    let Some(fx) = fixtures() else { return };
    let Some(dev) = vulkan() else { return };
    let path = fx.join("models/stories260K.gguf");
    let files = GgufModel::open(&path).unwrap();
    // One large tensor alone: its pieces are the only progress steps.
    let reqs: Vec<WeightRequest> = WeightRequest::all_to(&dev, &files)
        .into_iter()
        .filter(|r| r.desc.name == "token_embd.weight")
        .collect();
    assert_eq!(reqs.len(), 1);
    let size = reqs[0].size;
    let opts = small_pieces(2);
    // Direct reads fill several staging buffers at once: progress still
    // moves one piece at a time, and a cancel stops at the refused piece.
    for load_mode in [LoadMode::Mmap, LoadMode::None, LoadMode::Dio] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let params = ModelParams {
            load_mode,
            progress_callback: Some(Arc::new(move |f| {
                s.lock().unwrap().push(f);
                true
            })),
            ..ModelParams::default()
        };
        load_weights_with(&files, &reqs, &params, &opts).unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), size.div_ceil(4096), "one step per piece");
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*seen.last().unwrap(), 1.0);

        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let params = ModelParams {
            load_mode,
            progress_callback: Some(Arc::new(move |_| c.fetch_add(1, Ordering::Relaxed) < 4)),
            ..ModelParams::default()
        };
        let e = load_weights_with(&files, &reqs, &params, &opts)
            .err()
            .expect("cancelled");
        assert!(matches!(e, LlamaError::Cancelled), "{e}");
        assert_eq!(
            calls.load(Ordering::Relaxed),
            5,
            "stopped at the first refusal"
        );
    }
    // A whole model cancelled half way, then loaded again.
    for use_mmap in [true, false] {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let params = ModelParams {
            progress_callback: Some(Arc::new(move |f| {
                c.fetch_add(1, Ordering::Relaxed);
                f < 0.5
            })),
            ..gpu_params(use_mmap)
        };
        let e = Model::load(&path, &params).unwrap_err();
        assert!(matches!(e, LlamaError::Cancelled), "{e}");
        let m = Model::load(&path, &gpu_params(use_mmap)).unwrap();
        assert_weights_match(&m, &files, "reload after cancel");
    }
}

/// Writes a copy of `src` with a NaN written into tensor `name` at byte `at`
/// of its data (negative: from its end).
fn poison(src: &Path, out: &Path, bad: &[(&str, isize)]) {
    let f = GgufFile::open(src).unwrap();
    let mut bytes = std::fs::read(src).unwrap();
    for &(name, at) in bad {
        let info = f.tensor(name).unwrap().clone();
        let off = f.tensor_file_offset(&info) as usize;
        let at = if at < 0 {
            info.size as usize - at.unsigned_abs()
        } else {
            at as usize
        };
        bytes[off + at..off + at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    }
    std::fs::write(out, &bytes).unwrap();
}

/// The errors of loading `path` with `check_tensors` on every path: mmap
/// on and off, on the CPU and (with a Vulkan device) with every layer on
/// the GPU, each with the path it took.
fn checked_load_errors(path: &Path) -> Vec<(String, LlamaError)> {
    let gpu = vulkan().is_some();
    let mut errs = Vec::new();
    for n_gpu_layers in if gpu { vec![0, 99] } else { vec![0] } {
        for use_mmap in [true, false] {
            let params = ModelParams {
                check_tensors: true,
                load_mode: LoadMode::from_flags(use_mmap, false),
                n_gpu_layers,
                ..ModelParams::default()
            };
            let e = Model::load(path, &params).unwrap_err();
            errs.push((format!("ngl {n_gpu_layers} mmap {use_mmap}"), e));
        }
    }
    errs
}

#[test]
fn check_tensors_names_the_first_bad_tensor_in_file_order() {
    let Some(fx) = fixtures() else { return };
    let src = fx.join("models/stories260K.gguf");
    let f = GgufFile::open(&src).unwrap();
    let mut order: Vec<(u64, String)> = f
        .tensors()
        .iter()
        .map(|t| (f.tensor_file_offset(t), t.name.clone()))
        .collect();
    order.sort();
    let names: Vec<&str> = order.iter().map(|(_, n)| n.as_str()).collect();
    drop(f);
    let first = "token_embd.weight";
    let later = "blk.1.attn_q.weight";
    let pos = |n: &str| names.iter().position(|&x| x == n).unwrap();
    assert!(pos(first) < pos(later), "{names:?}");
    let dir = scratch("first-bad");
    let p = dir.join("two-bad.gguf");
    // The earlier tensor is large and bad near its end; the later is small
    // and bad at once: a parallel check finds the later one first.
    poison(&src, &p, &[(first, -8), (later, 0)]);
    for (what, e) in checked_load_errors(&p) {
        assert!(matches!(e, LlamaError::TensorData { .. }), "{what}: {e}");
        assert!(e.to_string().contains(first), "{what}: {e}");
    }
    // Only the later one bad: named on every path, also in pieces.
    let p2 = dir.join("one-bad.gguf");
    poison(&src, &p2, &[(later, -4)]);
    for (what, e) in checked_load_errors(&p2) {
        assert!(e.to_string().contains(later), "{what}: {e}");
    }
    if let Some(dev) = vulkan() {
        let files = GgufModel::open(&p2).unwrap();
        let reqs = WeightRequest::all_to(&dev, &files);
        let opts = small_pieces(2);
        let params = ModelParams {
            check_tensors: true,
            load_mode: LoadMode::None,
            ..ModelParams::default()
        };
        let e = load_weights_with(&files, &reqs, &params, &opts)
            .err()
            .expect("bad data");
        let msg = e.to_string();
        assert!(msg.contains(later) && msg.contains("piece"), "{msg}");
    }
}

/// Capabilities of the calling thread (Linux `capget`/`capset`).
#[cfg(target_os = "linux")]
mod caps {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }

    const VERSION_3: u32 = 0x2008_0522;
    /// CAP_IPC_LOCK: lock memory beyond the memlock limit.
    const IPC_LOCK: u32 = 14;

    /// Sets whether the calling thread has CAP_IPC_LOCK in effect; returns
    /// whether it had it.
    pub fn set_ipc_lock(on: bool) -> bool {
        let mut h = Header {
            version: VERSION_3,
            pid: 0,
        };
        let mut d = [Data::default(); 2];
        // SAFETY: capget writes one header and two data structs, which
        // these are, laid out as the kernel's.
        let rc = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
        if rc != 0 {
            return false;
        }
        let had = d[0].effective & (1 << IPC_LOCK) != 0;
        if on {
            d[0].effective |= d[0].permitted & (1 << IPC_LOCK);
        } else {
            d[0].effective &= !(1 << IPC_LOCK);
        }
        // SAFETY: as above; capset only reads them.
        unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) };
        had
    }
}

#[cfg(target_os = "linux")]
#[test]
fn mlock_under_a_tiny_limit_only_warns() {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models/stories260K.gguf");
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut old) };
    let tiny = libc::rlimit {
        rlim_cur: 16 * 1024,
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above; lowering the soft limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &tiny) }, 0);
    // Without CAP_IPC_LOCK the limit applies (this thread only).
    let had_cap = caps::set_ipc_lock(false);
    let mut results = Vec::new();
    for use_mmap in [true, false] {
        let params = ModelParams {
            load_mode: LoadMode::from_flags(use_mmap, true),
            ..ModelParams::default()
        };
        results.push(Model::load(&path, &params).map(|m| m.stats.clone()));
    }
    if had_cap {
        caps::set_ipc_lock(true);
    }
    // SAFETY: as above; restores the limit this test lowered.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &old) };
    for (r, use_mmap) in results.into_iter().zip([true, false]) {
        let st = r
            .unwrap_or_else(|e| panic!("mmap {use_mmap}: mlock failure must not be an error: {e}"));
        assert!(
            st.bytes_lock_failed > 0,
            "mmap {use_mmap}: locking ~1 MB under a 16 KiB limit cannot succeed: {st:?}"
        );
    }
    // With a limit large enough, everything is locked.
    let m = Model::load(
        &path,
        &ModelParams {
            load_mode: LoadMode::Mlock,
            ..ModelParams::default()
        },
    )
    .unwrap();
    if old.rlim_cur == libc::RLIM_INFINITY || old.rlim_cur >= 4 << 20 || had_cap {
        assert_eq!(m.stats.bytes_lock_failed, 0, "{:?}", m.stats);
        assert!(m.stats.bytes_locked > 0, "{:?}", m.stats);
    }
}

/// Direct reads into the staging ring of a file cut short after it was
/// opened: the bounds error names the last tensor, whose piece is in the
/// batch read last; nothing is left in flight.
#[test]
fn dio_uploads_of_a_truncated_file_name_the_tensor() {
    let Some(fx) = fixtures() else { return };
    let Some(dev) = vulkan() else { return };
    let bytes = std::fs::read(fx.join("models/stories260K.gguf")).unwrap();
    let p = scratch("dio-trunc-gpu").join("t.gguf");
    std::fs::write(&p, &bytes).unwrap();
    let files = GgufModel::open(&p).unwrap();
    let reqs = WeightRequest::all_to(&dev, &files);
    // The mapping's pages past the new end are never touched: direct
    // reads go to the file.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(bytes.len() as u64 - 100)
        .unwrap();
    let last = reqs.last().unwrap().desc.name.clone();
    let params = ModelParams {
        load_mode: LoadMode::Dio,
        ..ModelParams::default()
    };
    let opts = LoadOptions {
        staging_size: 4096,
        staging_count: 8,
        ..LoadOptions::default()
    };
    let e = load_weights_with(&files, &reqs, &params, &opts)
        .err()
        .expect("truncated")
        .to_string();
    assert!(
        e.contains("not within the file bounds") && e.contains(&last),
        "{e}"
    );
}
