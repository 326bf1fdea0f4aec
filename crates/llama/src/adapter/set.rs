//! The adapters a context applies: LoRA adapters with their scales and a
//! control vector with its layer range. Two sets are equal when they hold
//! the same loaded adapters with the same scales, the same vector and
//! range: a context runs a kept graph again only under an equal set.

use std::sync::Arc;

use super::{ControlVector, LoraAdapter, LoraWeight};
use crate::error::{LlamaError, Result};
use crate::model::{Model, Weight};

/// A control vector applied to layers `start..=end`.
#[derive(Clone, Debug)]
pub struct AppliedCvec {
    /// The directions.
    pub cvec: Arc<ControlVector>,
    /// First layer (inclusive).
    pub start: usize,
    /// Last layer (inclusive).
    pub end: usize,
}

impl AppliedCvec {
    /// `cvec` on layers `start..=end` in llama.cpp's terms: a start of 0 or
    /// less means layer 1, an end of 0 or less the last layer.
    pub fn new(cvec: Arc<ControlVector>, start: i64, end: i64, n_layer: usize) -> AppliedCvec {
        let start = if start <= 0 { 1 } else { start as usize };
        let end = if end <= 0 { n_layer } else { end as usize };
        AppliedCvec { cvec, start, end }
    }
}

/// The adapters of a context.
#[derive(Clone, Debug, Default)]
pub struct AdapterSet {
    loras: Vec<(Arc<LoraAdapter>, f32)>,
    cvec: Option<AppliedCvec>,
}

impl PartialEq for AdapterSet {
    fn eq(&self, other: &AdapterSet) -> bool {
        let key = |s: &AdapterSet| -> Vec<(u64, u32)> {
            s.loras.iter().map(|(a, s)| (a.id(), s.to_bits())).collect()
        };
        let cv = |s: &AdapterSet| s.cvec.as_ref().map(|c| (c.cvec.id(), c.start, c.end));
        key(self) == key(other) && cv(self) == cv(other)
    }
}

impl AdapterSet {
    /// No adapters.
    pub fn new() -> AdapterSet {
        AdapterSet::default()
    }

    /// Sets the LoRA adapters and their scales; an adapter whose scale is 0
    /// is left out, one given twice keeps its last scale. A scale that is
    /// not finite is an error.
    pub fn with_loras(mut self, loras: &[(Arc<LoraAdapter>, f32)]) -> Result<AdapterSet> {
        self.loras.clear();
        for (a, s) in loras {
            if !s.is_finite() {
                return Err(LlamaError::Adapter {
                    path: a.path().to_string(),
                    why: format!("scale {s} is not a finite number"),
                });
            }
            self.loras.retain(|(b, _)| b.id() != a.id());
            if *s != 0.0 {
                self.loras.push((a.clone(), *s));
            }
        }
        Ok(self)
    }

    /// Sets the control vector (None: none).
    pub fn with_cvec(mut self, cvec: Option<AppliedCvec>) -> AdapterSet {
        self.cvec = cvec;
        self
    }

    /// The applied LoRA adapters with their (non-zero) scales.
    pub fn loras(&self) -> &[(Arc<LoraAdapter>, f32)] {
        &self.loras
    }

    /// The control vector.
    pub fn cvec(&self) -> Option<&AppliedCvec> {
        self.cvec.as_ref()
    }

    /// True when nothing is applied.
    pub fn is_empty(&self) -> bool {
        self.loras.is_empty() && self.cvec.is_none()
    }

    /// The pairs of the weight `w` with their factors `scale * alpha / rank`.
    pub fn pairs_for<'s>(&'s self, w: &'s Weight) -> impl Iterator<Item = (&'s LoraWeight, f32)> {
        self.loras
            .iter()
            .filter_map(move |(a, s)| a.get(&w.desc.name).map(|p| (p, p.scale(a.alpha, *s))))
    }

    /// The direction added to the output of layer `il`, if any.
    pub fn direction(&self, il: usize) -> Option<&Weight> {
        let c = self.cvec.as_ref()?;
        if il < c.start || il > c.end {
            return None;
        }
        c.cvec.direction(il)
    }

    /// An error unless every adapter was loaded for `model`.
    pub fn check_model(&self, model: &Model) -> Result<()> {
        for (a, _) in &self.loras {
            if !a.belongs_to(model) {
                return Err(LlamaError::Adapter {
                    path: a.path().to_string(),
                    why: "loaded for another model".into(),
                });
            }
        }
        if let Some(c) = &self.cvec {
            if !c.cvec.belongs_to(model) {
                return Err(LlamaError::Adapter {
                    path: "control vector".into(),
                    why: "placed for another model".into(),
                });
            }
        }
        Ok(())
    }

    /// Most nodes the set adds to a forward graph of `n_layer` layers:
    /// six per pair (two leaves, two products, a scale, an add) and two per
    /// layer for the control vector.
    pub fn extra_nodes(&self, n_layer: usize) -> usize {
        let pairs: usize = self.loras.iter().map(|(a, _)| a.n_pairs()).sum();
        6 * pairs + if self.cvec.is_some() { 2 * n_layer } else { 0 }
    }
}
