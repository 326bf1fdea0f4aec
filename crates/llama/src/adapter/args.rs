//! The adapter flags of the tools, as llama.cpp's: `--lora FILE[,FILE]`,
//! `--lora-scaled FILE:SCALE[,...]`, `--lora-init-without-apply`,
//! `--control-vector FILE[,FILE]`, `--control-vector-scaled
//! FILE:SCALE[,...]` and `--control-vector-layer-range START END`, and
//! loading what they name for a model.

use std::sync::Arc;

use super::{AdapterSet, AppliedCvec, ControlVector, LoraAdapter};
use crate::error::{LlamaError, Result};
use crate::model::Model;

/// What the adapter flags asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterArgs {
    /// LoRA files with their scales, in the order given.
    pub loras: Vec<(String, f32)>,
    /// Load the adapters without applying them (the server applies them
    /// per request or through `POST /lora-adapters`).
    pub lora_init_without_apply: bool,
    /// Control vector files with their strengths.
    pub cvecs: Vec<(String, f32)>,
    /// Layers of the control vectors, inclusive (0 or less: the default
    /// first or last layer).
    pub cvec_layer_range: (i64, i64),
}

impl Default for AdapterArgs {
    fn default() -> AdapterArgs {
        AdapterArgs {
            loras: Vec::new(),
            lora_init_without_apply: false,
            cvecs: Vec::new(),
            cvec_layer_range: (-1, -1),
        }
    }
}

fn invalid(flag: &str, val: &str, what: &str) -> LlamaError {
    LlamaError::InvalidParam(format!("invalid value '{val}' for {flag}: expected {what}"))
}

/// Splits `FILE:SCALE` at its last colon.
fn file_scale(flag: &str, item: &str) -> Result<(String, f32)> {
    let (file, scale) = item
        .rsplit_once(':')
        .filter(|(f, _)| !f.is_empty())
        .ok_or_else(|| invalid(flag, item, "FILE:SCALE"))?;
    let s: f32 = scale
        .trim()
        .parse()
        .map_err(|_| invalid(flag, item, "FILE:SCALE with a number for SCALE"))?;
    if !s.is_finite() {
        return Err(invalid(flag, item, "a finite SCALE"));
    }
    Ok((file.to_string(), s))
}

/// The comma-separated items of a flag's value, none of them empty.
fn items<'v>(flag: &str, val: &'v str) -> Result<Vec<&'v str>> {
    let v: Vec<&str> = val.split(',').collect();
    if v.iter().any(|s| s.is_empty()) {
        return Err(invalid(
            flag,
            val,
            "a comma-separated list without empty items",
        ));
    }
    Ok(v)
}

impl AdapterArgs {
    /// Applies `flag` when it is an adapter flag (reading its values with
    /// `val`); false when it is not one.
    pub fn flag(
        &mut self,
        flag: &str,
        val: &mut dyn FnMut(&str) -> Result<String>,
    ) -> Result<bool> {
        match flag {
            "--lora" => {
                let v = val("FNAME[,FNAME]")?;
                for f in items(flag, &v)? {
                    self.loras.push((f.to_string(), 1.0));
                }
            }
            "--lora-scaled" => {
                let v = val("FNAME:SCALE[,...]")?;
                for item in items(flag, &v)? {
                    self.loras.push(file_scale(flag, item)?);
                }
            }
            "--lora-init-without-apply" => self.lora_init_without_apply = true,
            "--control-vector" => {
                let v = val("FNAME[,FNAME]")?;
                for f in items(flag, &v)? {
                    self.cvecs.push((f.to_string(), 1.0));
                }
            }
            "--control-vector-scaled" => {
                let v = val("FNAME:SCALE[,...]")?;
                for item in items(flag, &v)? {
                    self.cvecs.push(file_scale(flag, item)?);
                }
            }
            "--control-vector-layer-range" => {
                let a = val("START END")?;
                let a: i64 = a
                    .parse()
                    .map_err(|_| invalid(flag, &a, "an integer START"))?;
                let b = val("END")?;
                let b: i64 = b.parse().map_err(|_| invalid(flag, &b, "an integer END"))?;
                self.cvec_layer_range = (a, b);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// True when no adapter flag was given.
    pub fn is_empty(&self) -> bool {
        self.loras.is_empty() && self.cvecs.is_empty()
    }

    /// Loads the adapters and control vectors for `model`.
    pub fn load(&self, model: &Model) -> Result<LoadedAdapters> {
        let mut loras = Vec::with_capacity(self.loras.len());
        for (path, scale) in &self.loras {
            loras.push((LoraAdapter::load(model, path)?, *scale));
        }
        let cvec = if self.cvecs.is_empty() {
            None
        } else {
            let (start, end) = self.cvec_layer_range;
            let n_layer = model.hparams.n_layer;
            let applied = AppliedCvec::new(
                ControlVector::load(model, &self.cvecs)?,
                start,
                end,
                n_layer,
            );
            if applied.start > applied.end || applied.start >= n_layer {
                return Err(LlamaError::InvalidParam(format!(
                    "--control-vector-layer-range {start} {end}: no layer of the model's {n_layer} (1 to {}) in the range",
                    n_layer.saturating_sub(1)
                )));
            }
            Some(applied)
        };
        Ok(LoadedAdapters {
            loras,
            apply: !self.lora_init_without_apply,
            cvec,
        })
    }
}

/// Adapters loaded from the flags.
#[derive(Clone, Debug)]
pub struct LoadedAdapters {
    /// LoRA adapters with the scales of the flags.
    pub loras: Vec<(Arc<LoraAdapter>, f32)>,
    /// False with `--lora-init-without-apply`.
    pub apply: bool,
    /// The summed control vectors with their layer range.
    pub cvec: Option<AppliedCvec>,
}

impl LoadedAdapters {
    /// The set a context starts with: the adapters at their scales (none
    /// with `--lora-init-without-apply`) and the control vector.
    pub fn initial_set(&self) -> Result<AdapterSet> {
        let loras: &[(Arc<LoraAdapter>, f32)] = if self.apply { &self.loras } else { &[] };
        Ok(AdapterSet::new()
            .with_loras(loras)?
            .with_cvec(self.cvec.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::AdapterArgs;

    fn parse(s: &str) -> crate::error::Result<AdapterArgs> {
        let mut a = AdapterArgs::default();
        let mut it = s.split_whitespace().map(String::from);
        while let Some(flag) = it.next() {
            let mut val = |what: &str| {
                it.next().ok_or_else(|| {
                    crate::error::LlamaError::InvalidParam(format!("{flag} needs {what}"))
                })
            };
            assert!(a.flag(&flag, &mut val)?, "{flag} not taken");
        }
        Ok(a)
    }

    #[test]
    fn flags() {
        let a = parse("--lora a.gguf,b.gguf --lora-scaled c.gguf:0.5,d:e.gguf:-1").unwrap();
        assert_eq!(
            a.loras,
            vec![
                ("a.gguf".into(), 1.0),
                ("b.gguf".into(), 1.0),
                ("c.gguf".into(), 0.5),
                ("d:e.gguf".into(), -1.0)
            ]
        );
        assert!(!a.lora_init_without_apply);
        let a = parse("--lora-init-without-apply --control-vector v.gguf --control-vector-scaled w.gguf:2 --control-vector-layer-range 2 3").unwrap();
        assert!(a.lora_init_without_apply);
        assert_eq!(
            a.cvecs,
            vec![("v.gguf".into(), 1.0), ("w.gguf".into(), 2.0)]
        );
        assert_eq!(a.cvec_layer_range, (2, 3));
    }

    #[test]
    fn bad_flags_name_the_flag() {
        for bad in [
            "--lora-scaled a.gguf",
            "--lora-scaled a.gguf:x",
            "--lora-scaled a.gguf:inf",
            "--lora-scaled :1",
            "--lora a.gguf,,b.gguf",
            "--control-vector-scaled v.gguf",
            "--control-vector-layer-range 1",
            "--control-vector-layer-range 1 x",
            "--lora",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            let flag = bad.split_whitespace().next().unwrap();
            assert!(e.contains(flag), "{bad}: {e}");
        }
    }
}
