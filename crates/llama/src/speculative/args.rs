//! The speculative decoding flags llama-cli and llama-server share, with
//! llama.cpp's names and its older aliases: `-md`, `--draft-max`,
//! `--draft-min`, `--draft-p-min`, `-ngld`, `-devd`, `--spec-type` and the
//! `ngram-simple` sizes. Loading the draft model checks it against the
//! target.

use std::sync::Arc;

use super::{check_vocab_compatible, DraftParams, NgramParams};
use crate::error::{LlamaError, Result};
use crate::model::Model;
use crate::params::ModelParams;

/// What proposes the tokens (`--spec-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpecType {
    /// No speculation.
    #[default]
    None,
    /// A draft model (`draft-simple`; the type `-md` selects).
    Draft,
    /// Prompt lookup in the history (`ngram-simple`).
    NgramSimple,
}

/// The types llama.cpp names that this build does not offer.
const UNSUPPORTED_TYPES: [&str; 8] = [
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
];

impl SpecType {
    /// The type of a `--spec-type` name.
    pub fn from_name(name: &str) -> Result<SpecType> {
        match name {
            "none" => Ok(SpecType::None),
            "draft-simple" => Ok(SpecType::Draft),
            "ngram-simple" => Ok(SpecType::NgramSimple),
            n if UNSUPPORTED_TYPES.contains(&n) => Err(LlamaError::NotSupported(format!(
                "speculative decoding type '{n}' (this build offers none, draft-simple and ngram-simple)"
            ))),
            n => Err(LlamaError::InvalidParam(format!(
                "unknown speculative decoding type '{n}' (none, draft-simple, ngram-simple)"
            ))),
        }
    }
}

/// Parsed speculative decoding flags.
#[derive(Clone, Debug, Default)]
pub struct SpecArgs {
    /// `-md`: the draft model's file.
    pub model: Option<String>,
    /// `--draft-max`, `--draft-min`, `--draft-p-min`.
    pub params: DraftParams,
    /// `-ngld`: draft layers on GPUs (None: as the target's `-ngl`).
    pub n_gpu_layers: Option<i32>,
    /// `-devd`: the draft's devices (None: as the target's `-dev`).
    pub devices: Option<String>,
    /// `--spec-type` as given (None: a draft model when `-md` is given).
    pub spec_type: Option<SpecType>,
    /// `--spec-ngram-simple-size-n` and `-m`.
    pub ngram: NgramParams,
}

impl SpecArgs {
    /// Takes the speculative flags out of `rest`, leaving the others.
    pub fn take(rest: &mut Vec<String>) -> Result<SpecArgs> {
        let mut f = SpecArgs::default();
        let mut kept = Vec::new();
        let mut it = std::mem::take(rest).into_iter();
        while let Some(a) = it.next() {
            let mut val = |what: &str| {
                it.next()
                    .ok_or_else(|| LlamaError::InvalidParam(format!("{a} needs a value ({what})")))
            };
            let bad = |v: &str, what: &str| {
                LlamaError::InvalidParam(format!("invalid value '{v}' for {a}: expected {what}"))
            };
            let count =
                |v: String| -> Result<usize> { v.parse().map_err(|_| bad(&v, "an integer >= 0")) };
            let size = |v: String| -> Result<usize> {
                v.parse()
                    .ok()
                    .filter(|n| (1..=super::ngram::NGRAM_SIZE_MAX).contains(n))
                    .ok_or_else(|| bad(&v, "an integer in [1, 1024]"))
            };
            match a.as_str() {
                "-md" | "--model-draft" | "--spec-draft-model" => f.model = Some(val("file")?),
                "--draft-max" | "--draft" | "--draft-n" | "--spec-draft-n-max" => {
                    f.params.n_max = count(val("int")?)?
                }
                "--draft-min" | "--draft-n-min" | "--spec-draft-n-min" => {
                    f.params.n_min = count(val("int")?)?
                }
                "--draft-p-min" | "--spec-draft-p-min" => {
                    let v = val("probability")?;
                    f.params.p_min = v
                        .parse::<f32>()
                        .ok()
                        .filter(|p| (0.0..=1.0).contains(p))
                        .ok_or_else(|| bad(&v, "a number in [0, 1]"))?;
                }
                "-ngld" | "--gpu-layers-draft" | "--n-gpu-layers-draft" | "--spec-draft-ngl" => {
                    let v = val("int")?;
                    f.n_gpu_layers = Some(match v.as_str() {
                        "auto" | "all" => -1,
                        _ => v.parse().map_err(|_| bad(&v, "an integer, auto or all"))?,
                    });
                }
                "-devd" | "--device-draft" | "--spec-draft-device" => {
                    f.devices = Some(val("list")?)
                }
                "--spec-type" => {
                    let v = val("type")?;
                    let mut kinds = Vec::new();
                    for name in v.split(',').map(str::trim) {
                        let k = SpecType::from_name(name)?;
                        if !kinds.contains(&k) {
                            kinds.push(k);
                        }
                    }
                    kinds.retain(|&k| k != SpecType::None);
                    if kinds.len() > 1 {
                        return Err(LlamaError::InvalidParam(format!(
                            "{a} '{v}': one speculative decoding type at a time"
                        )));
                    }
                    f.spec_type = Some(kinds.pop().unwrap_or(SpecType::None));
                }
                "--spec-ngram-simple-size-n" => f.ngram.size_n = size(val("int")?)?,
                "--spec-ngram-simple-size-m" => f.ngram.size_m = size(val("int")?)?,
                _ => kept.push(a),
            }
        }
        *rest = kept;
        f.kind()?;
        Ok(f)
    }

    /// The type in use: `--spec-type`, else a draft model when `-md` is
    /// given. A draft type without a model, or a model with another type,
    /// is an error.
    pub fn kind(&self) -> Result<SpecType> {
        let kind = self.spec_type.unwrap_or(if self.model.is_some() {
            SpecType::Draft
        } else {
            SpecType::None
        });
        match (kind, &self.model) {
            (SpecType::Draft, None) => Err(LlamaError::InvalidParam(
                "speculative decoding type draft-simple needs a draft model (-md)".into(),
            )),
            (SpecType::None | SpecType::NgramSimple, Some(_)) => {
                Err(LlamaError::InvalidParam(format!(
                    "a draft model (-md) with --spec-type {}: one speculative decoding type at a time",
                    if kind == SpecType::None {
                        "none"
                    } else {
                        "ngram-simple"
                    }
                )))
            }
            _ => Ok(kind),
        }
    }

    /// The draft model's load parameters: the target's with `-ngld` and
    /// `-devd` applied, without a progress callback.
    pub fn draft_model_params(&self, target: &ModelParams) -> Result<ModelParams> {
        let mut p = target.clone();
        p.progress_callback = None;
        if let Some(n) = self.n_gpu_layers {
            p.n_gpu_layers = n;
        }
        if let Some(list) = &self.devices {
            p.devices = Some(crate::cli::parse_devices(list)?);
        }
        Ok(p)
    }

    /// Loads the draft model (None without `-md`) and checks that its
    /// vocabulary serves `target`'s. An error names the draft model.
    pub fn load_draft(&self, target: &Model, params: &ModelParams) -> Result<Option<Arc<Model>>> {
        let Some(path) = &self.model else {
            return Ok(None);
        };
        let p = self.draft_model_params(params)?;
        let dm = Model::load(path, &p).map_err(|e| {
            LlamaError::InvalidParam(format!("draft model: failed to load '{path}': {e}"))
        })?;
        check_vocab_compatible(&target.vocab, &dm.vocab)?;
        Ok(Some(Arc::new(dm)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(s: &str) -> Result<(SpecArgs, Vec<String>)> {
        let mut rest: Vec<String> = s.split_whitespace().map(String::from).collect();
        let a = SpecArgs::take(&mut rest)?;
        Ok((a, rest))
    }

    #[test]
    fn flags_and_aliases() {
        let (a, rest) =
            take("-md d.gguf --draft-max 8 --draft-min 2 --draft-p-min 0.5 -ngld 3 -t 2").unwrap();
        assert_eq!(a.model.as_deref(), Some("d.gguf"));
        assert_eq!(
            a.params,
            DraftParams {
                n_max: 8,
                n_min: 2,
                p_min: 0.5
            }
        );
        assert_eq!(a.n_gpu_layers, Some(3));
        assert_eq!(a.kind().unwrap(), SpecType::Draft);
        assert_eq!(rest, vec!["-t", "2"]);
        let (a, _) =
            take("--spec-draft-model d.gguf --spec-draft-n-max 5 --spec-draft-ngl all").unwrap();
        assert_eq!((a.params.n_max, a.n_gpu_layers), (5, Some(-1)));
        let (a, _) = take(
            "--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 7",
        )
        .unwrap();
        assert_eq!(a.kind().unwrap(), SpecType::NgramSimple);
        assert_eq!(
            a.ngram,
            NgramParams {
                size_n: 3,
                size_m: 7
            }
        );
        assert_eq!(take("").unwrap().0.kind().unwrap(), SpecType::None);
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            "--draft-max -1",
            "--draft-min x",
            "--draft-p-min 2",
            "--draft-p-min",
            "-ngld many",
            "--spec-type magic",
            "--spec-type ngram-mod",
            "--spec-type ngram-simple,draft-simple -md d.gguf",
            "--spec-type draft-simple",
            "--spec-type ngram-simple -md d.gguf",
            "--spec-ngram-simple-size-n 0",
            "--spec-ngram-simple-size-m 2000",
        ] {
            assert!(take(bad).is_err(), "{bad}");
        }
        let e = take("--spec-type ngram-mod").unwrap_err().to_string();
        assert!(
            e.contains("not supported") || e.contains("ngram-mod"),
            "{e}"
        );
    }
}
