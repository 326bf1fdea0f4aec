//! The presets and layouts match the fixture models: same tensor names,
//! shapes and order, same metadata keys. Needs the fixtures (found at
//! `$LLAMA_FIXTURES` or `../shared/fixtures` from the workspace root);
//! skipped without them unless `REQUIRE_FIXTURES=1`.

mod common;

use gguf::GgufFile;
use xtask::gen_model::shape::{Preset, Shape, ShapeOverrides};
use xtask::gen_model::vocab::Vocab;
use xtask::gen_model::{generate, ModelSpec, WriteSettings};

use common::{fixtures, tiny_fixture_shape};

fn shapes(f: &GgufFile) -> Vec<(String, Vec<u64>)> {
    f.tensors()
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone()))
        .collect()
}

#[test]
fn stories260k_preset_has_the_real_models_shapes() {
    let Some(dir) = fixtures() else { return };
    let real = GgufFile::open(dir.join("models/stories260K.gguf")).unwrap();
    let spec = common::spec(Preset::Stories260k, ShapeOverrides::default(), "f32", 1);
    let (bytes, _) = generate(&spec, &WriteSettings::default(), Vec::new()).unwrap();
    let ours = GgufFile::from_bytes(&bytes).unwrap();
    // The real file orders its tensors differently (llama2.c converter).
    let (mut a, mut b) = (shapes(&real), shapes(&ours));
    a.sort();
    b.sort();
    assert_eq!(a, b);
    for key in [
        "llama.context_length",
        "llama.embedding_length",
        "llama.block_count",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.rope.dimension_count",
    ] {
        assert_eq!(
            real.get_uint(key).unwrap(),
            ours.get_uint(key).unwrap(),
            "{key}"
        );
    }
}

#[test]
fn tiny_layout_matches_the_fixture_generator() {
    let Some(dir) = fixtures() else { return };
    let path = dir.join("models/tiny-f32.gguf");
    let tiny = GgufFile::open(&path).unwrap();
    let o = tiny_fixture_shape();
    let shape = Shape::resolve(Preset::Stories260k, &o).unwrap();
    let spec = ModelSpec {
        vocab: Vocab::from_gguf(&path).unwrap(),
        shape,
        ty: "f32".parse().unwrap(),
        seed: 21,
        name: "tiny".into(),
        alignment: None,
        experts: None,
    };
    let (bytes, _) = generate(&spec, &WriteSettings::default(), Vec::new()).unwrap();
    let ours = GgufFile::from_bytes(&bytes).unwrap();
    assert_eq!(
        shapes(&tiny),
        shapes(&ours),
        "same tensors in the same order"
    );
    assert_eq!(tiny.metadata(), ours.metadata(), "same keys and values");
    assert_eq!(tiny.data_offset(), ours.data_offset());
    assert_eq!(tiny.file_size(), bytes.len() as u64);
}

#[test]
fn vocab_from_a_bpe_vocabulary() {
    let Some(dir) = fixtures() else { return };
    let path = dir.join("vocab/ggml-vocab-gpt-2.gguf");
    let vocab = Vocab::from_gguf(&path).unwrap();
    assert_eq!(vocab.n_vocab, 50257);
    let o = ShapeOverrides {
        n_vocab: Some(vocab.n_vocab),
        n_layer: Some(1),
        ..Default::default()
    };
    let mut spec = common::spec(Preset::Stories260k, ShapeOverrides::default(), "q8_0", 1);
    spec.shape = Shape::resolve(Preset::Stories260k, &o).unwrap();
    spec.vocab = vocab;
    let (bytes, _) = generate(&spec, &WriteSettings::default(), Vec::new()).unwrap();
    let ours = GgufFile::from_bytes(&bytes).unwrap();
    let src = GgufFile::open(&path).unwrap();
    assert_eq!(ours.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(
        ours.get_array_len("tokenizer.ggml.merges").unwrap(),
        src.get_array_len("tokenizer.ggml.merges").unwrap()
    );
    assert_eq!(ours.tensor("output.weight").unwrap().dims, vec![64, 50257]);
}
