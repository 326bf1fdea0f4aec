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
