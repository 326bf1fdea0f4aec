//! The model the README's first command runs (`models/stories260K.gguf`,
//! kept in the repository): it loads without fixtures and writes the
//! story llama.cpp writes from the same prompt ("Once upon a time, there
//! was a little girl named Lily. ...").

use std::path::PathBuf;

use llama::{Context, ContextParams, Model};
use tests::{cpu_params, expected, fixtures, greedy, ids};

fn repo_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("models")
        .join("stories260K.gguf")
}

#[test]
fn readme_model_writes_the_story() {
    let model = Model::load(repo_model(), &cpu_params()).expect("models/stories260K.gguf loads");
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    let cp = ContextParams {
        n_ctx: 512,
        n_threads: 2,
        n_threads_batch: 2,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(&model, cp).expect("context");
    let got = greedy(&mut ctx, &prompt, 24);
    let text = model.vocab.detokenize_lossy(&got, false, false);
    assert!(
        text.starts_with(", there was a little girl named Lily."),
        "unexpected continuation: {text:?}"
    );
    if let Some(fx) = fixtures() {
        let exp = expected(&fx, "stories260K");
        let want = ids(&exp["greedy"]["greedy_tokens"]);
        assert_eq!(
            got[..],
            want[..got.len()],
            "greedy ids differ from llama.cpp's"
        );
    }
}

#[test]
fn readme_model_is_the_fixture() {
    let Some(fx) = fixtures() else { return };
    let ours = std::fs::read(repo_model()).expect("models/stories260K.gguf");
    let theirs = std::fs::read(fx.join("models").join("stories260K.gguf")).expect("fixture");
    assert!(
        ours == theirs,
        "models/stories260K.gguf differs from the fixture"
    );
}
