//! Reading a vocabulary from GGUF metadata (`tokenizer.ggml.*`).

use gguf::{GgufFile, Metadata};

use super::build::{SpecialIds, VocabData};
use super::error::{Result, VocabError};
use super::Vocab;

/// Wraps a reader error with the key it concerns.
fn at<T>(key: &str, r: gguf::Result<T>) -> Result<T> {
    r.map_err(|source| VocabError::Gguf {
        key: key.to_string(),
        source,
    })
}

/// `Some(value)` when `key` is present, an error when it has another type.
fn opt<'a, T>(
    meta: &'a Metadata,
    key: &str,
    get: impl FnOnce(&'a Metadata, &str) -> gguf::Result<T>,
) -> Result<Option<T>> {
    if meta.contains_key(key) {
        at(key, get(meta, key)).map(Some)
    } else {
        Ok(None)
    }
}

fn opt_u64(meta: &Metadata, key: &str) -> Result<Option<u64>> {
    opt(meta, key, Metadata::get_uint)
}

fn opt_bool(meta: &Metadata, key: &str) -> Result<Option<bool>> {
    opt(meta, key, Metadata::get_bool)
}

fn opt_string(meta: &Metadata, key: &str) -> Result<Option<String>> {
    opt(meta, key, |m, k| m.get_str(k).map(str::to_string))
}

fn opt_bytes_array(meta: &Metadata, key: &str) -> Result<Option<Vec<Vec<u8>>>> {
    opt(meta, key, |m, k| {
        m.get_string_array(k)
            .map(|a| a.iter().map(<[u8]>::to_vec).collect())
    })
}

/// Token types are `i32` in llama.cpp's files; `u32` arrays read the same.
fn opt_token_types(meta: &Metadata, key: &str) -> Result<Option<Vec<i32>>> {
    if !meta.contains_key(key) {
        return Ok(None);
    }
    if let Ok(v) = meta.get_slice::<i32>(key) {
        return Ok(Some(v.to_vec()));
    }
    if let Ok(v) = meta.get_slice::<u32>(key) {
        return Ok(Some(v.iter().map(|&t| t as i32).collect()));
    }
    at(key, meta.get_slice::<i32>(key)).map(|v| Some(v.to_vec()))
}

/// A byte blob stored as an `u8` (or `i8`) array.
fn opt_u8_array(meta: &Metadata, key: &str) -> Result<Option<Vec<u8>>> {
    if !meta.contains_key(key) {
        return Ok(None);
    }
    if let Ok(v) = meta.get_slice::<i8>(key) {
        return Ok(Some(v.iter().map(|&b| b as u8).collect()));
    }
    at(key, meta.get_slice::<u8>(key)).map(|v| Some(v.to_vec()))
}

impl VocabData {
    /// Reads the vocabulary keys of `meta`.
    pub fn from_metadata(meta: &Metadata) -> Result<VocabData> {
        const MODEL: &str = "tokenizer.ggml.model";
        let model = opt_string(meta, MODEL)?.ok_or(VocabError::MissingKey(MODEL))?;
        let is_no_vocab = model == "no_vocab" || model == "none";
        let tokens = if is_no_vocab {
            Vec::new()
        } else {
            opt_bytes_array(meta, "tokenizer.ggml.tokens")?
                .ok_or(VocabError::MissingKey("tokenizer.ggml.tokens"))?
        };
        let vocab_size = match opt_string(meta, "general.architecture")? {
            Some(arch) if is_no_vocab => opt_u64(meta, &format!("{arch}.vocab_size"))?,
            _ => None,
        };
        let id = |key: &str| opt_u64(meta, key);
        Ok(VocabData {
            model,
            pre: opt_string(meta, "tokenizer.ggml.pre")?,
            name: opt(meta, "general.name", |m, k| {
                m.get_bytes(k)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
            })?,
            tokens,
            scores: opt(meta, "tokenizer.ggml.scores", |m, k| {
                m.get_slice::<f32>(k).map(<[f32]>::to_vec)
            })?,
            token_types: opt_token_types(meta, "tokenizer.ggml.token_type")?,
            merges: opt_bytes_array(meta, "tokenizer.ggml.merges")?,
            special_ids: SpecialIds {
                bos: id("tokenizer.ggml.bos_token_id")?,
                eos: id("tokenizer.ggml.eos_token_id")?,
                eot: id("tokenizer.ggml.eot_token_id")?,
                eom: id("tokenizer.ggml.eom_token_id")?,
                unk: id("tokenizer.ggml.unknown_token_id")?,
                sep: id("tokenizer.ggml.seperator_token_id")?,
                pad: id("tokenizer.ggml.padding_token_id")?,
                mask: id("tokenizer.ggml.mask_token_id")?,
                fim_pre: id("tokenizer.ggml.fim_pre_token_id")?,
                fim_suf: id("tokenizer.ggml.fim_suf_token_id")?,
                fim_mid: id("tokenizer.ggml.fim_mid_token_id")?,
                fim_pad: id("tokenizer.ggml.fim_pad_token_id")?,
                fim_rep: id("tokenizer.ggml.fim_rep_token_id")?,
                fim_sep: id("tokenizer.ggml.fim_sep_token_id")?,
                prefix: id("tokenizer.ggml.prefix_token_id")?,
                suffix: id("tokenizer.ggml.suffix_token_id")?,
                middle: id("tokenizer.ggml.middle_token_id")?,
            },
            add_bos: opt_bool(meta, "tokenizer.ggml.add_bos_token")?,
            add_eos: opt_bool(meta, "tokenizer.ggml.add_eos_token")?,
            add_space_prefix: opt_bool(meta, "tokenizer.ggml.add_space_prefix")?,
            remove_extra_whitespaces: opt_bool(meta, "tokenizer.ggml.remove_extra_whitespaces")?,
            token_type_count: opt_u64(meta, "tokenizer.ggml.token_type_count")?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            vocab_size,
            precompiled_charsmap: opt_u8_array(meta, "tokenizer.ggml.precompiled_charsmap")?,
            normalizer_lowercase: opt_bool(meta, "tokenizer.ggml.normalizer.lowercase")?,
            normalizer_strip_accents: opt_bool(meta, "tokenizer.ggml.normalizer.strip_accents")?,
        })
    }
}

impl Vocab {
    /// Builds the vocabulary of a GGUF file from its `tokenizer.ggml.*`
    /// keys, with llama.cpp's defaults for absent ones.
    pub fn from_gguf(file: &GgufFile) -> Result<Vocab> {
        Vocab::from_metadata(file.metadata())
    }

    /// [`Vocab::from_gguf`] on metadata alone.
    pub fn from_metadata(meta: &Metadata) -> Result<Vocab> {
        Vocab::from_parts(VocabData::from_metadata(meta)?)
    }
}
