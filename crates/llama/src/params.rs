//! Model loading parameters, with llama.cpp's names and defaults.

use std::fmt;
use std::sync::Arc;

use ggml_core::Device;

use crate::error::{LlamaError, Result};

/// How a model is split over several GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SplitMode {
    /// One GPU only (`main_gpu`).
    None,
    /// Whole layers per GPU (default).
    #[default]
    Layer,
    /// Rows of each matrix split over GPUs.
    Row,
}

impl std::str::FromStr for SplitMode {
    type Err = LlamaError;
    fn from_str(s: &str) -> Result<SplitMode> {
        match s {
            "none" => Ok(SplitMode::None),
            "layer" => Ok(SplitMode::Layer),
            "row" => Ok(SplitMode::Row),
            _ => Err(LlamaError::InvalidParam(format!(
                "split mode '{s}': expected one of none, layer, row"
            ))),
        }
    }
}

/// How the weights are read from the file (`-lm/--load-mode`, llama.cpp's
/// `llama_load_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LoadMode {
    /// Memory-map the file, unless a device cannot use mapped memory. Every
    /// device of this engine takes uploads from a mapping, so it is `Mmap`.
    #[default]
    Auto,
    /// Plain buffered reads into the buffers.
    None,
    /// Memory-map the file: weights on the CPU are used in place.
    Mmap,
    /// Plain reads, and the buffers locked in RAM.
    Mlock,
    /// Memory-map the file and lock the mapped weights in RAM.
    MmapMlock,
    /// Direct I/O (`O_DIRECT`): reads that bypass the page cache, aligned
    /// to the file system's block size; buffered reads where the file
    /// system refuses it.
    Dio,
}

impl LoadMode {
    /// The mode for the older pair of switches `use_mmap`, `use_mlock`.
    pub fn from_flags(mmap: bool, mlock: bool) -> LoadMode {
        match (mmap, mlock) {
            (true, false) => LoadMode::Mmap,
            (true, true) => LoadMode::MmapMlock,
            (false, false) => LoadMode::None,
            (false, true) => LoadMode::Mlock,
        }
    }

    /// The file is memory-mapped and CPU weights are used in place.
    pub fn use_mmap(self) -> bool {
        matches!(self, LoadMode::Auto | LoadMode::Mmap | LoadMode::MmapMlock)
    }

    /// The weights are locked in RAM.
    pub fn use_mlock(self) -> bool {
        matches!(self, LoadMode::Mlock | LoadMode::MmapMlock)
    }

    /// The weights are read with direct I/O.
    pub fn use_direct_io(self) -> bool {
        self == LoadMode::Dio
    }

    /// This mode without memory mapping (`--no-mmap`): locking is kept.
    pub fn without_mmap(self) -> Result<LoadMode> {
        match self {
            LoadMode::Dio => Err(LlamaError::InvalidParam(
                "--no-mmap cannot be combined with --load-mode dio (which maps nothing)".into(),
            )),
            m => Ok(LoadMode::from_flags(false, m.use_mlock())),
        }
    }

    /// This mode with the weights locked in RAM (`--mlock`).
    pub fn with_mlock(self) -> Result<LoadMode> {
        match self {
            LoadMode::Dio => Err(LlamaError::InvalidParam(
                "--mlock cannot be combined with --load-mode dio: use mlock or mmap+mlock".into(),
            )),
            m => Ok(LoadMode::from_flags(m.use_mmap(), true)),
        }
    }

    /// llama.cpp's name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            LoadMode::Auto => "auto",
            LoadMode::None => "none",
            LoadMode::Mmap => "mmap",
            LoadMode::Mlock => "mlock",
            LoadMode::MmapMlock => "mmap+mlock",
            LoadMode::Dio => "dio",
        }
    }
}

impl fmt::Display for LoadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for LoadMode {
    type Err = LlamaError;
    fn from_str(s: &str) -> Result<LoadMode> {
        Ok(match s {
            "auto" => LoadMode::Auto,
            "none" => LoadMode::None,
            "mmap" => LoadMode::Mmap,
            "mlock" => LoadMode::Mlock,
            "mmap+mlock" => LoadMode::MmapMlock,
            "dio" => LoadMode::Dio,
            _ => {
                return Err(LlamaError::InvalidParam(format!(
                    "load mode '{s}': expected one of auto, none, mmap, mlock, mmap+mlock, dio"
                )))
            }
        })
    }
}

/// A typed metadata override (`--override-kv KEY=TYPE:VALUE`).
#[derive(Clone, Debug, PartialEq)]
pub enum KvOverrideValue {
    /// `int:`
    Int(i64),
    /// `float:`
    Float(f64),
    /// `bool:`
    Bool(bool),
    /// `str:`
    Str(String),
}

/// One metadata override.
#[derive(Clone, Debug, PartialEq)]
pub struct KvOverride {
    /// The metadata key, e.g. `llama.context_length`.
    pub key: String,
    /// The value it takes.
    pub value: KvOverrideValue,
}

impl std::str::FromStr for KvOverride {
    type Err = LlamaError;
    /// Parses llama.cpp's `KEY=TYPE:VALUE` syntax (`int`, `float`, `bool`, `str`).
    fn from_str(s: &str) -> Result<KvOverride> {
        let bad = |why: &str| LlamaError::InvalidParam(format!("override-kv '{s}': {why}"));
        let (key, rest) = s
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=TYPE:VALUE"))?;
        if key.is_empty() || key.len() >= 128 {
            return Err(bad("key must have 1 to 127 bytes"));
        }
        let (ty, val) = rest
            .split_once(':')
            .ok_or_else(|| bad("expected TYPE:VALUE after '='"))?;
        let value = match ty {
            "int" => KvOverrideValue::Int(val.parse().map_err(|_| bad("invalid int"))?),
            "float" => KvOverrideValue::Float(val.parse().map_err(|_| bad("invalid float"))?),
            "bool" => KvOverrideValue::Bool(match val {
                "true" => true,
                "false" => false,
                _ => return Err(bad("bool must be true or false")),
            }),
            "str" => {
                if val.len() > 127 {
                    return Err(bad("string values are limited to 127 bytes"));
                }
                KvOverrideValue::Str(val.to_string())
            }
            _ => return Err(bad("type must be int, float, bool or str")),
        };
        Ok(KvOverride {
            key: key.to_string(),
            value,
        })
    }
}

/// A tensor placement override (`-ot PATTERN=BUFFER_TYPE`): tensors whose name
/// matches the regular expression go to the named buffer type.
#[derive(Clone, Debug)]
pub struct TensorBuftOverride {
    /// Regular expression searched in tensor names.
    pub pattern: regex::Regex,
    /// Buffer type name (`CPU`, `Vulkan0`, ...).
    pub buft: String,
}

impl std::str::FromStr for TensorBuftOverride {
    type Err = LlamaError;
    fn from_str(s: &str) -> Result<TensorBuftOverride> {
        let (pat, buft) = s.split_once('=').ok_or_else(|| {
            LlamaError::InvalidParam(format!(
                "tensor override '{s}': expected PATTERN=BUFFER_TYPE"
            ))
        })?;
        let pattern = regex::Regex::new(pat).map_err(|e| {
            LlamaError::InvalidParam(format!("tensor override pattern '{pat}': {e}"))
        })?;
        Ok(TensorBuftOverride {
            pattern,
            buft: buft.to_string(),
        })
    }
}

/// Names of the expert tensors (llama.cpp's `LLM_FFN_EXPS_REGEX`): the
/// per-expert gate, up, down and fused gate-up projections.
pub const FFN_EXPS_PATTERN: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

/// The CPU's own buffer type: expert tensors kept "in CPU memory" go here,
/// in ggml's layout (as llama.cpp's overrides name "CPU"), so that large
/// batches can still offload them to the GPU.
const CPU_BUFT: &str = "CPU";

impl TensorBuftOverride {
    /// Every expert tensor in CPU memory (`--cpu-moe`): attention, norms and
    /// the KV cache stay on the layer's device, the expert products run on
    /// the CPU (or are offloaded for large batches like any CPU weight).
    pub fn cpu_moe() -> TensorBuftOverride {
        TensorBuftOverride {
            pattern: regex::Regex::new(FFN_EXPS_PATTERN).expect("constant pattern"),
            buft: CPU_BUFT.into(),
        }
    }

    /// The expert tensors of the first `n` layers in CPU memory
    /// (`--n-cpu-moe N`).
    pub fn n_cpu_moe(n: usize) -> Vec<TensorBuftOverride> {
        (0..n)
            .map(|il| TensorBuftOverride {
                pattern: regex::Regex::new(&format!(r"blk\.{il}{FFN_EXPS_PATTERN}"))
                    .expect("constant pattern"),
                buft: CPU_BUFT.into(),
            })
            .collect()
    }
}

/// Progress callback: receives the fraction loaded (0..=1); returning false cancels.
pub type ProgressCallback = Arc<dyn Fn(f32) -> bool + Send + Sync>;

/// Parameters of [`crate::Model::load`] (llama_model_params).
#[derive(Clone)]
pub struct ModelParams {
    /// Devices to use for offloading; `None` = all GPUs.
    pub devices: Option<Vec<Arc<dyn Device>>>,
    /// Layers to store on GPUs, counted from the last layer; a negative value
    /// or a value above n_layer means all of them, and above n_layer the
    /// output layer too.
    pub n_gpu_layers: i32,
    /// How to split the model over several GPUs.
    pub split_mode: SplitMode,
    /// The GPU used for the whole model with split mode none.
    pub main_gpu: i32,
    /// Fraction of the model per GPU (normalised); empty = by free memory.
    pub tensor_split: Vec<f32>,
    /// How the weights are read: mapped, plain reads, locked, direct I/O.
    pub load_mode: LoadMode,
    /// Offer the CPU's extra buffer types (weights repacked for its matrix
    /// kernels, `CPU_REPACK`) to the weights kept on the CPU, when the
    /// model uses no GPU (with one, CPU weights stay in ggml's layout so
    /// that large batches can be offloaded).
    pub use_extra_bufts: bool,
    /// Validate every tensor's data (NaN/Inf) while loading.
    pub check_tensors: bool,
    /// Load only the vocabulary.
    pub vocab_only: bool,
    /// Metadata overrides.
    pub kv_overrides: Vec<KvOverride>,
    /// Buffer type overrides by tensor name.
    pub tensor_buft_overrides: Vec<TensorBuftOverride>,
    /// Progress callback; returning false cancels loading.
    pub progress_callback: Option<ProgressCallback>,
    /// Plan the memory per device and stop before allocating anything.
    pub dry_run: bool,
}

impl Default for ModelParams {
    fn default() -> ModelParams {
        ModelParams {
            devices: None,
            // llama_model_default_params: every layer, where there is a
            // GPU (the tools' --fit brings it down to what fits).
            n_gpu_layers: -1,
            split_mode: SplitMode::Layer,
            main_gpu: 0,
            tensor_split: Vec::new(),
            load_mode: LoadMode::Auto,
            use_extra_bufts: true,
            check_tensors: false,
            vocab_only: false,
            kv_overrides: Vec::new(),
            tensor_buft_overrides: Vec::new(),
            progress_callback: None,
            dry_run: false,
        }
    }
}

impl fmt::Debug for ModelParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelParams")
            .field(
                "devices",
                &self
                    .devices
                    .as_ref()
                    .map(|d| d.iter().map(|d| d.name().to_string()).collect::<Vec<_>>()),
            )
            .field("n_gpu_layers", &self.n_gpu_layers)
            .field("split_mode", &self.split_mode)
            .field("main_gpu", &self.main_gpu)
            .field("tensor_split", &self.tensor_split)
            .field("load_mode", &self.load_mode)
            .field("use_extra_bufts", &self.use_extra_bufts)
            .field("check_tensors", &self.check_tensors)
            .field("vocab_only", &self.vocab_only)
            .field("kv_overrides", &self.kv_overrides)
            .field("tensor_buft_overrides", &self.tensor_buft_overrides)
            .field("dry_run", &self.dry_run)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama_model_default_params (llama.cpp 0c1e570): every layer on the
    /// GPUs, mapped, with the CPU's extra buffer types.
    #[test]
    fn defaults_are_llama_cpps() {
        let p = ModelParams::default();
        assert_eq!(p.n_gpu_layers, -1);
        assert_eq!(p.split_mode, SplitMode::Layer);
        assert_eq!(p.main_gpu, 0);
        assert_eq!(p.load_mode, LoadMode::Auto);
        assert!(p.use_extra_bufts && !p.check_tensors && !p.vocab_only);
        assert!(p.devices.is_none() && p.tensor_buft_overrides.is_empty());
    }

    #[test]
    fn parses_overrides() {
        let o: KvOverride = "llama.context_length=int:256".parse().unwrap();
        assert_eq!(o.value, KvOverrideValue::Int(256));
        assert!("x=int:abc".parse::<KvOverride>().is_err());
        assert!("novalue".parse::<KvOverride>().is_err());
        assert!("k=float:1.5".parse::<KvOverride>().is_ok());
        assert!("k=bool:yes".parse::<KvOverride>().is_err());
        let t: TensorBuftOverride = "ffn_.*=CPU".parse().unwrap();
        assert!(t.pattern.is_match("blk.0.ffn_up.weight"));
        assert!("(=CPU".parse::<TensorBuftOverride>().is_err());
        let all = TensorBuftOverride::cpu_moe();
        assert!(all.pattern.is_match("blk.17.ffn_down_exps.weight"));
        assert!(all.pattern.is_match("blk.0.ffn_gate_up_exps.weight"));
        assert!(!all.pattern.is_match("blk.0.ffn_gate_inp.weight"));
        assert!(!all.pattern.is_match("blk.0.ffn_down.weight"));
        let first2 = TensorBuftOverride::n_cpu_moe(2);
        let hit = |n: &str| first2.iter().any(|o| o.pattern.is_match(n));
        assert!(hit("blk.1.ffn_up_exps.weight") && hit("blk.0.ffn_gate_exps.weight"));
        assert!(!hit("blk.2.ffn_up_exps.weight") && !hit("blk.10.ffn_up_exps.weight"));
        assert!(!hit("blk.1.attn_q.weight"));
        assert_eq!("row".parse::<SplitMode>().unwrap(), SplitMode::Row);
        assert!("rows".parse::<SplitMode>().is_err());
    }

    #[test]
    fn load_modes_parse_and_combine() {
        for m in ["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"] {
            let mode: LoadMode = m.parse().unwrap();
            assert_eq!(mode.to_string(), m);
        }
        let e = "direct".parse::<LoadMode>().unwrap_err().to_string();
        assert!(e.contains("'direct'") && e.contains("dio"), "{e}");
        assert!(LoadMode::Auto.use_mmap() && !LoadMode::Auto.use_mlock());
        assert!(LoadMode::Dio.use_direct_io() && !LoadMode::Dio.use_mmap());
        assert_eq!(LoadMode::Auto.without_mmap().unwrap(), LoadMode::None);
        assert_eq!(LoadMode::Auto.with_mlock().unwrap(), LoadMode::MmapMlock);
        assert_eq!(LoadMode::None.with_mlock().unwrap(), LoadMode::Mlock);
        assert_eq!(LoadMode::MmapMlock.without_mmap().unwrap(), LoadMode::Mlock);
        assert!(LoadMode::Dio.with_mlock().is_err());
        assert!(LoadMode::Dio.without_mmap().is_err());
    }
}
