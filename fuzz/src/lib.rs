//! What the fuzz targets share: where the fixtures are, a stories260K model
//! and context on the CPU, loaded once per process, and a scratch file for
//! the loaders that read paths.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use llama::{Context, ContextParams, Model, ModelParams};

/// The fixtures folder (`$LLAMA_FIXTURES`, else `../shared/fixtures` next
/// to the workspace); the targets that read fixtures cannot run without it.
pub fn fixtures() -> PathBuf {
    test_support::fixtures().expect(
        "the fuzz targets need the fixtures: set LLAMA_FIXTURES or place them in ../shared/fixtures",
    )
}

/// Model parameters that keep everything on the CPU, without repacking
/// (so that loading stays fast and the same on every machine).
pub fn cpu_params() -> ModelParams {
    ModelParams {
        devices: Some(Vec::new()),
        n_gpu_layers: 0,
        use_extra_bufts: false,
        ..ModelParams::default()
    }
}

/// Context parameters small enough that a context is made in milliseconds.
pub fn tiny_context() -> ContextParams {
    ContextParams {
        n_ctx: 64,
        n_batch: 16,
        n_ubatch: 16,
        n_seq_max: 2,
        n_threads: 1,
        n_threads_batch: 1,
        ..ContextParams::default()
    }
}

/// Registers the CPU backend (once; later calls do nothing).
pub fn init_backends() {
    llama::backend_init();
}

/// stories260K on the CPU, loaded once and kept for the whole run.
pub fn stories() -> &'static Model {
    static MODEL: OnceLock<&'static Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        init_backends();
        let path = fixtures().join("models/stories260K.gguf");
        let model = Model::load(&path, &cpu_params())
            .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
        Box::leak(Box::new(model))
    })
}

/// A fresh context over `model` with [`tiny_context`] sizes.
pub fn context(model: &'static Model) -> Context<'static> {
    Context::new(model, tiny_context()).unwrap_or_else(|e| panic!("context: {e}"))
}

/// Writes `bytes` to this process's scratch file `name` (in the system's
/// temporary folder) and returns its path, for loaders that take a path.
pub fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llama-rs-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("scratch file");
    path
}

/// The bytes of a fixture file, relative to the fixtures folder.
pub fn fixture_bytes(rel: impl AsRef<Path>) -> Vec<u8> {
    let p = fixtures().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
