//! Load modes: direct I/O (`-lm dio`), plain reads (`none`) and the
//! mapping (`mmap`) give the same weights and the same greedy tokens, on
//! every fixture model, including a split model and a copy on tmpfs.

mod common;

use common::{fixtures, scratch};
use llama::loader::{load_weights_with, LoadOptions, WeightRequest};
use llama::{Batch, Context, ContextParams, LoadMode, Model, ModelParams};
use test_support::greedy_token;

/// Sixteen greedy tokens after a short prompt, or why the model cannot load.
fn try_greedy(path: &std::path::Path, load_mode: LoadMode) -> Result<Vec<i32>, String> {
    let params = ModelParams {
        load_mode,
        // Repacking would hide the bytes behind the CPU's layout; the
        // plain layout makes any difference in what was read show.
        use_extra_bufts: false,
        ..ModelParams::default()
    };
    let what = format!("{} ({load_mode})", path.display());
    let model = Model::load(path, &params).map_err(|e| e.to_string())?;
    let cp = ContextParams {
        n_ctx: 64,
        n_threads: 2,
        n_threads_batch: 2,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(&model, cp).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut toks = model.vocab.tokenize("Once upon a time", true, true);
    toks.truncate(8);
    ctx.decode(&Batch::get_one(&toks)).unwrap();
    let mut out = Vec::new();
    for _ in 0..16 {
        let t = greedy_token(ctx.logits_ith(-1).unwrap());
        out.push(t);
        ctx.decode(&Batch::get_one(&[t])).unwrap();
    }
    Ok(out)
}

fn greedy(path: &std::path::Path, load_mode: LoadMode) -> Vec<i32> {
    try_greedy(path, load_mode).unwrap_or_else(|e| panic!("{} ({load_mode}): {e}", path.display()))
}

#[test]
fn dio_none_and_mmap_give_the_same_greedy_tokens() {
    let Some(fx) = fixtures() else { return };
    let models = fx.join("models");
    let mut names: Vec<String> = std::fs::read_dir(&models)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".gguf") && (!n.contains("-split-") || n.contains("00001-of")))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "fixture models missing: {names:?}");
    for n in &names {
        let p = models.join(n);
        // A model this engine does not run yet (mixture of experts) fails
        // the same way whatever the mode.
        let mmap = try_greedy(&p, LoadMode::Mmap);
        if let Err(e) = &mmap {
            assert!(
                e.contains("not supported") || e.contains("unknown model architecture"),
                "{n}: {e}"
            );
        }
        assert_eq!(try_greedy(&p, LoadMode::None), mmap, "{n}: none vs mmap");
        assert_eq!(try_greedy(&p, LoadMode::Dio), mmap, "{n}: dio vs mmap");
    }
}

/// tmpfs (where the kernel is older than 6.6) refuses `O_DIRECT`: the load
/// falls back to buffered reads with the same result. The fall-back is
/// also forced, whatever the file system, with `refuse_direct_io`.
#[test]
fn dio_falls_back_to_buffered_reads() {
    let Some(fx) = fixtures() else { return };
    let src = fx.join("models/tiny-q4_0.gguf");
    let want = greedy(&src, LoadMode::Mmap);
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        let p = shm.join(format!("llama-load-modes-{}.gguf", std::process::id()));
        std::fs::copy(&src, &p).unwrap();
        let got = greedy(&p, LoadMode::Dio);
        let _ = std::fs::remove_file(&p);
        assert_eq!(got, want, "dio on tmpfs");
    }
    // The largest fixture too: its tensors cross the chunks that direct
    // reads split a span into, read by several threads at once.
    for src in [src, fx.join("models/tiny-f32.gguf")] {
        read_every_byte(&src);
    }
}

/// Loads every weight of `src` into CPU buffers with direct I/O, with and
/// without the forced fall-back: the bytes are the file's.
fn read_every_byte(src: &std::path::Path) {
    let files = gguf::GgufModel::open(src).unwrap();
    let model = Model::load(
        src,
        &ModelParams {
            use_extra_bufts: false,
            ..ModelParams::default()
        },
    )
    .unwrap();
    let reqs = cpu_requests(&model, &files);
    for refuse_direct_io in [false, true] {
        let opts = LoadOptions {
            refuse_direct_io,
            ..LoadOptions::default()
        };
        let params = ModelParams {
            load_mode: LoadMode::Dio,
            use_extra_bufts: false,
            ..ModelParams::default()
        };
        let lw = load_weights_with(&files, &reqs, &params, &opts).unwrap();
        assert_eq!(lw.stats.bytes_mapped, 0);
        let total: u64 = reqs.iter().map(|r| r.size as u64).sum();
        assert_eq!(lw.stats.bytes_read, total);
        for (r, w) in reqs.iter().zip(&lw.placements) {
            let mut got = vec![0u8; r.size];
            w.at.buffer.get_tensor(w.at.offset, &mut got).unwrap();
            let m = files.files()[r.file].mmap().unwrap();
            let at = r.file_offset as usize;
            assert!(
                got == m[at..at + r.size],
                "{} of {} differs (refuse {refuse_direct_io})",
                r.desc.name,
                src.display()
            );
        }
    }
}

/// Requests for every weight of `files` into the CPU's plain buffer type.
fn cpu_requests(model: &Model, files: &gguf::GgufModel) -> Vec<WeightRequest> {
    let cpu = model.cpu.clone();
    let entry = llama::placement::BuftEntry {
        buft: cpu.buffer_type(),
        dev: cpu,
    };
    let mut reqs: Vec<WeightRequest> = files
        .tensors()
        .map(|(fi, info)| WeightRequest {
            kind: llama::TensorKind::Output,
            layer: None,
            desc: ggml_core::TensorDesc::new(
                info.name.clone(),
                info.ty,
                &info.dims.iter().map(|&d| d as usize).collect::<Vec<_>>(),
            ),
            file: fi,
            file_offset: files.files()[fi].tensor_file_offset(info),
            size: info.size as usize,
            entry: entry.clone(),
        })
        .collect();
    reqs.sort_by_key(|r| (r.file, r.file_offset));
    reqs
}

/// A truncated file read with direct I/O is the same bounds error as with
/// plain reads.
#[test]
fn dio_on_a_truncated_file_is_a_bounds_error() {
    let Some(fx) = fixtures() else { return };
    let bytes = std::fs::read(fx.join("models/stories260K.gguf")).unwrap();
    let dir = scratch("dio-trunc");
    let p = dir.join("t.gguf");
    std::fs::write(&p, &bytes[..bytes.len() - 1000]).unwrap();
    let params = ModelParams {
        load_mode: LoadMode::Dio,
        ..ModelParams::default()
    };
    let e = Model::load(&p, &params).unwrap_err().to_string();
    assert!(e.contains("not within the file bounds"), "{e}");
}

/// Writes a GGUF file of tensors of odd sizes and types, aligned to
/// `alignment` bytes, with bytes that differ everywhere; returns its path.
fn odd_file(name: &str, alignment: u32) -> std::path::PathBuf {
    use gguf::{GgmlType, GgufWriter, Metadata, TensorInfo};
    let shapes: [(&str, GgmlType, u64); 9] = [
        ("a", GgmlType::F32, 7),
        ("b", GgmlType::F32, 1000),
        ("c", GgmlType::Q8_0, 32 * 3001),
        // Several chunks of the direct readers.
        ("d", GgmlType::F32, 3_146_001),
        // Skipped by some request sets: a gap that starts a new buffer.
        ("e", GgmlType::F32, 300_001),
        ("f", GgmlType::F32, 1_500_003),
        ("g", GgmlType::F32, 5),
        ("h", GgmlType::Q8_0, 32 * 100_001),
        ("i", GgmlType::F32, 9),
    ];
    let mut md = Metadata::new();
    md.set("general.architecture", "llama");
    md.set("general.alignment", alignment);
    let infos: Vec<TensorInfo> = shapes
        .iter()
        .map(|&(n, ty, len)| TensorInfo::new(n, ty, &[len]).unwrap())
        .collect();
    let p = scratch(name).join("odd.gguf");
    let out = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    let mut w = GgufWriter::new(out, &md, &infos).unwrap();
    let mut seed = u64::from(alignment);
    for t in &infos {
        let bytes: Vec<u8> = (0..t.size)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 56) as u8
            })
            .collect();
        w.write_tensor(&t.name, &bytes).unwrap();
    }
    w.finish().unwrap();
    p
}

/// Direct reads into the CPU's buffers: every byte is the file's, for
/// files aligned to 8 and 32 bytes and request sets with gaps; the buffers
/// are laid out as the file is, so that only the partial blocks at the
/// ends of each tensor are copied through a bounce buffer; and the memory
/// plan of a direct-I/O load has the same buffers as the load.
#[test]
fn dio_reads_straight_into_cpu_buffers() {
    let Some(fx) = fixtures() else { return };
    // A model only to reach the CPU device.
    let model = Model::load(fx.join("models/stories260K.gguf"), &ModelParams::default()).unwrap();
    let params = ModelParams {
        load_mode: LoadMode::Dio,
        use_extra_bufts: false,
        ..ModelParams::default()
    };
    for alignment in [8, 32] {
        let p = odd_file(&format!("dio-odd-{alignment}"), alignment);
        let files = gguf::GgufModel::open(&p).unwrap();
        let all = cpu_requests(&model, &files);
        let block = std::os::unix::fs::MetadataExt::blksize(&std::fs::metadata(&p).unwrap());
        let block = (block as usize).max(4096);
        let subsets: [Vec<WeightRequest>; 3] = [
            all.clone(),
            all.iter().filter(|r| r.desc.name != "e").cloned().collect(),
            all.iter().step_by(2).cloned().collect(),
        ];
        for (k, reqs) in subsets.iter().enumerate() {
            let what = format!("alignment {alignment}, requests {k}");
            let lw = load_weights_with(&files, reqs, &params, &LoadOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut allowed = 0u64;
            for (r, w) in reqs.iter().zip(&lw.placements) {
                let mut got = vec![0u8; r.size];
                w.at.buffer.get_tensor(w.at.offset, &mut got).unwrap();
                let m = files.files()[r.file].mmap().unwrap();
                let at = r.file_offset as usize;
                assert!(got == m[at..at + r.size], "{what}: {} differs", r.desc.name);
                // Buffers from 4 MiB up start on a huge page: only the
                // blocks at the ends of a tensor are bounced there.
                allowed += if w.at.buffer.size() >= 4 << 20 {
                    (2 * block).min(r.size) as u64
                } else {
                    r.size as u64
                };
            }
            assert!(
                lw.stats.bytes_bounced <= allowed,
                "{what}: {} bytes bounced, at most {allowed} expected",
                lw.stats.bytes_bounced
            );
            let plan = llama::loader::plan_weights(&files, reqs, &params).unwrap();
            assert_eq!(plan.sizes, lw.sizes, "{what}: planned sizes");
            let sizes = |v: &llama::loader::LoadedWeights| -> Vec<usize> {
                v.buffers.iter().map(|b| b.size()).collect()
            };
            assert_eq!(sizes(&plan), sizes(&lw), "{what}: planned buffers");
            if k == 1 {
                assert!(lw.buffers.len() >= 2, "{what}: the gap starts a buffer");
            }
        }
    }
}

/// Direct reads of weights the CPU stores repacked go straight into
/// aligned staging memory: none of their bytes is bounced, and the
/// greedy tokens are those of the mapping.
#[test]
fn dio_with_repacking_reads_straight_into_staging() {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models/tiny-q4_0.gguf");
    let params = |load_mode| ModelParams {
        load_mode,
        devices: Some(Vec::new()),
        ..ModelParams::default()
    };
    let m = Model::load(&path, &params(LoadMode::Dio)).unwrap();
    let s = &m.stats;
    if s.bytes_repacked == 0 {
        eprintln!("skipped: this CPU repacks no weight of {}", path.display());
        return;
    }
    assert!(
        s.bytes_bounced <= s.bytes_read,
        "{} bytes bounced, {} read into host buffers, {} repacked",
        s.bytes_bounced,
        s.bytes_read,
        s.bytes_repacked
    );
    let tokens = |m: &Model| {
        let cp = ContextParams {
            n_ctx: 64,
            n_threads: 2,
            n_threads_batch: 2,
            ..ContextParams::default()
        };
        let mut ctx = Context::new(m, cp).unwrap();
        let mut t = vec![1, 300, 301];
        ctx.decode(&Batch::get_one(&t)).unwrap();
        for _ in 0..8 {
            let next = greedy_token(ctx.logits_ith(-1).unwrap());
            t.push(next);
            ctx.decode(&Batch::get_one(&[next])).unwrap();
        }
        t
    };
    let mapped = Model::load(&path, &params(LoadMode::Mmap)).unwrap();
    assert_eq!(tokens(&m), tokens(&mapped));
}
