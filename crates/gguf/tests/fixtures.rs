//! Every fixture parses, mapped and streamed, and known facts hold.

mod common;

use std::fs::File;
use std::io::BufReader;

use gguf::{GgmlType, GgufFile, Value};

#[test]
fn every_fixture_parses_mapped_and_streamed() {
    let dir = fixtures_or_skip!();
    for path in common::all_ggufs(&dir) {
        let mapped = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let f = File::open(&path).expect("open");
        let streamed = GgufFile::read_from(BufReader::new(f)).expect("read_from");
        assert_eq!(mapped.metadata(), streamed.metadata(), "{}", path.display());
        assert_eq!(mapped.tensors(), streamed.tensors());
        assert_eq!(mapped.data_offset(), streamed.data_offset());
        assert_eq!(mapped.version(), 3);
        assert!(mapped.mmap().is_some() && streamed.mmap().is_none());
        assert_eq!(mapped.path(), Some(path.as_path()));
        let mut r = File::open(&path).expect("open");
        for t in mapped.tensors() {
            let data = mapped.tensor_data(t).expect("tensor data");
            assert_eq!(data.len() as u64, t.size);
            assert_eq!(mapped.tensor(&t.name), Some(t));
            let mut buf = vec![0u8; t.size as usize];
            streamed
                .read_tensor_data(&mut r, t, &mut buf)
                .expect("read tensor");
            assert_eq!(buf, data, "{} {}", path.display(), t.name);
        }
        assert!(matches!(
            streamed.tensors().first().map(|t| streamed.tensor_data(t)),
            None | Some(Err(gguf::Error::NotMapped))
        ));
    }
}

#[test]
fn stories260k_facts() {
    let dir = fixtures_or_skip!();
    let f = GgufFile::open(dir.join("models/stories260K.gguf")).expect("open");
    assert_eq!(f.tensors().len(), 48);
    assert_eq!(f.get("llama.context_length"), Some(&Value::U32(512)));
    assert_eq!(f.get_u32("llama.context_length").unwrap(), 512);
    assert_eq!(f.get_uint("llama.context_length").unwrap(), 512);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(
        f.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
        1e-5
    );
    assert!(matches!(
        f.get_u32("llama.rope.freq_base"),
        Err(gguf::Error::KeyNotFound(_))
    ));
    let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 512);
    assert_eq!(&tokens[..3], &["<unk>", "<s>", "</s>"]);
    assert_eq!(
        f.get_array::<f32>("tokenizer.ggml.scores").unwrap().len(),
        512
    );
    assert_eq!(
        f.get_slice::<i32>("tokenizer.ggml.token_type").unwrap()[0],
        2
    );
    assert_eq!(f.get_array_len("tokenizer.ggml.tokens").unwrap(), 512);
    let e = f.get_u32("tokenizer.ggml.model").unwrap_err().to_string();
    assert!(
        e.contains("tokenizer.ggml.model") && e.contains("str") && e.contains("u32"),
        "{e}"
    );
    let t = f.tensor("token_embd.weight").expect("token_embd");
    assert_eq!(
        (t.ty, t.dims.as_slice(), t.ne()),
        (GgmlType::F32, &[64, 512][..], [64, 512, 1, 1])
    );
    assert_eq!(t.n_elements(), 64 * 512);
    assert_eq!(f.tensor_file_offset(t), f.data_offset() + t.offset);
    assert_eq!(f.alignment(), 32);
}

#[test]
fn deepseek_vocab_has_102400_tokens() {
    let dir = fixtures_or_skip!();
    let f = GgufFile::open(dir.join("vocab/ggml-vocab-deepseek-llm.gguf")).expect("open");
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        102400
    );
    assert!(f.tensors().is_empty());
}

#[test]
fn tensor_bytes_match_reference_values() {
    // The f32 tensor's bytes are the reference values themselves.
    let dir = fixtures_or_skip!();
    let f = GgufFile::open(dir.join("models/tiny-f32.gguf")).expect("open");
    let t = f.tensor("blk.0.attn_q.weight").expect("tensor");
    let expected =
        std::fs::read(dir.join("expected/dequant/tiny-f32.blk.0.attn_q.weight.f32")).expect("read");
    assert_eq!(f.tensor_data(t).unwrap(), expected.as_slice());
}
