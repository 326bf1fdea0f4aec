//! Architectures, presets copied from real models, and the resolved shape of
//! the model to generate.

use super::archs::{generator, names, ArchGen};
use crate::error::{Error, Result};

/// An architecture: an entry of the llama crate's registry, so that one
/// added there is known here too. What the generator writes for it
/// (defaults, keys, block layout) is its entry in [`super::archs`].
pub use llama::Arch;

/// The architecture `name` as `--arch` takes it: one of llama's registry
/// that the generator writes.
pub fn parse_arch(name: &str) -> Result<Arch> {
    let arch = Arch::from_name(name).map_err(|_| {
        let known: Vec<&str> = Arch::all().map(|a| a.name()).collect();
        Error::Usage(format!(
            "--arch: unknown architecture '{name}' (the llama crate knows {})",
            known.join(", ")
        ))
    })?;
    generator_of(arch)?;
    Ok(arch)
}

/// The generator entry of `arch`, or an error naming what gen-model writes.
fn generator_of(arch: Arch) -> Result<&'static ArchGen> {
    generator(arch).ok_or_else(|| {
        let names: Vec<&str> = names().collect();
        Error::Usage(format!(
            "--arch: gen-model cannot write {} models; it writes {} \
             (experts with --n-expert)",
            arch.name(),
            names.join(", ")
        ))
    })
}

/// A preset's architecture, which the registry and the generator both
/// have (the presets test covers every preset).
fn preset_arch(name: &str) -> (Arch, &'static ArchGen) {
    let arch = Arch::from_name(name).expect("presets name registered architectures");
    let gen = generator_of(arch).expect("presets name architectures the generator writes");
    (arch, gen)
}

/// Shapes copied from real models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// TinyStories 260K (llama2.c): 512 tokens, 64 wide, 5 layers.
    #[value(name = "stories260k")]
    Stories260k,
    /// TinyLlama 1.1B.
    #[value(name = "tinyllama-1.1b")]
    Tinyllama1_1b,
    /// LLaMA 7B.
    #[value(name = "llama-7b")]
    Llama7b,
    /// Qwen2 0.5B (tied output).
    #[value(name = "qwen2-0.5b")]
    Qwen2_0_5b,
    /// Mamba 130M (Mamba-1): 24 layers 768 wide, inner 1536, state 16,
    /// time-step rank 48, vocabulary 50280, tied output.
    #[value(name = "mamba-130m")]
    Mamba130m,
    /// Mamba-2 370M: 48 layers 1024 wide, inner 2048 in 32 SSM heads of
    /// 64, state 128, one group, convolution 4, vocabulary 50288, tied
    /// output.
    #[value(name = "mamba2-370m")]
    Mamba2_370m,
    /// Granite-4.0-H-Micro (the hybrid 3B; Granite-4.0-Micro itself is
    /// all attention): 40 layers 2048 wide, Mamba-2 mixers (64 SSM heads
    /// of 64, state 128, one group) with attention (32 heads, 8 kv heads,
    /// no rope) at layers 5, 15, 25 and 35, dense SwiGLU FFNs of 8192,
    /// vocabulary 100352, tied output.
    #[value(name = "granite-4.0-h-micro")]
    Granite4HMicro,
    /// LFM2-350M: 16 layers 1024 wide, short convolutions of 3 taps with
    /// attention (16 heads of 64, 8 kv heads) at layers 2, 5, 8, 10, 12
    /// and 14, SwiGLU FFNs of 4608, vocabulary 65536, tied output.
    #[value(name = "lfm2-350m")]
    Lfm2_350m,
    /// DeepSeek-V2-Lite (deepseek2): 27 layers 2048 wide, 16 heads with
    /// multi-head latent attention (latent 512, key 128 + rotary 64, value
    /// 128, no query LoRA), a dense first layer (FFN 10944), then 64
    /// experts of 1408 (6 used) and 2 shared, vocabulary 102400.
    #[value(name = "deepseek-v2-lite")]
    DeepseekV2Lite,
    /// gpt-oss-20b: 24 layers 2880 wide, 64 query heads and 8 kv heads of
    /// 64, sliding windows of 128 on every other layer, 32 experts of 2880
    /// (4 used), vocabulary 201088.
    #[value(name = "gpt-oss-20b")]
    GptOss20b,
    /// Qwen3.5 0.8B: 24 layers 1024 wide, gated DeltaNet (16 Q/K and 16 V
    /// heads of 128, convolution 4) with gated attention (8 heads of 256,
    /// 2 kv heads, rope over 64 dims) every fourth layer, SwiGLU FFNs of
    /// 3584, vocabulary 248320, tied output.
    #[value(name = "qwen3.5-0.8b")]
    Qwen35_0_8b,
    /// RWKV-7 "Goose" 0.4B (World): 24 layers 1024 wide, heads of 64,
    /// channel mix 4096, low-rank decay 64, learning rate 64, value
    /// residual 32, gate 128, vocabulary 65536, separate output.
    #[value(name = "rwkv7-0.4b")]
    Rwkv7_0_4b,
}

impl Preset {
    /// Every preset, in the order `--help` lists them.
    pub fn all() -> &'static [Preset] {
        <Preset as clap::ValueEnum>::value_variants()
    }

    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Stories260k => "stories260k",
            Preset::Tinyllama1_1b => "tinyllama-1.1b",
            Preset::Llama7b => "llama-7b",
            Preset::Qwen2_0_5b => "qwen2-0.5b",
            Preset::Mamba130m => "mamba-130m",
            Preset::Mamba2_370m => "mamba2-370m",
            Preset::Granite4HMicro => "granite-4.0-h-micro",
            Preset::Lfm2_350m => "lfm2-350m",
            Preset::DeepseekV2Lite => "deepseek-v2-lite",
            Preset::GptOss20b => "gpt-oss-20b",
            Preset::Qwen35_0_8b => "qwen3.5-0.8b",
            Preset::Rwkv7_0_4b => "rwkv7-0.4b",
        }
    }

    /// The preset's shape.
    pub fn shape(self) -> Shape {
        let (arch, n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, tied) = match self {
            Preset::Stories260k => ("llama", 512, 64, 5, 8, 4, 172, 512, false),
            Preset::Tinyllama1_1b => ("llama", 32000, 2048, 22, 32, 4, 5632, 2048, false),
            Preset::Llama7b => ("llama", 32000, 4096, 32, 32, 32, 11008, 4096, false),
            Preset::Qwen2_0_5b => ("qwen2", 151_936, 896, 24, 14, 2, 4864, 32768, true),
            // The pure SSM models have no heads nor FFN: their head counts
            // and n_ff are placeholders, written as 0.
            Preset::Mamba130m => ("mamba", 50_280, 768, 24, 1, 1, 1, 1 << 20, true),
            Preset::Mamba2_370m => ("mamba2", 50_288, 1024, 48, 1, 1, 1, 1 << 20, true),
            // RWKV has no attention heads: placeholders, written as 0.
            Preset::Rwkv7_0_4b => ("rwkv7", 65_536, 1024, 24, 1, 1, 4096, 1 << 20, false),
            Preset::Granite4HMicro => (
                "granitehybrid",
                100_352,
                2048,
                40,
                32,
                8,
                8192,
                131_072,
                true,
            ),
            Preset::Lfm2_350m => ("lfm2", 65_536, 1024, 16, 16, 8, 4608, 128_000, true),
            // head_count_kv is written as 1 (the latent); 16 here keeps
            // the shape's heads valid.
            Preset::DeepseekV2Lite => (
                "deepseek2",
                102_400,
                2048,
                27,
                16,
                16,
                10944,
                163_840,
                false,
            ),
            Preset::Qwen35_0_8b => ("qwen35", 248_320, 1024, 24, 8, 2, 3584, 262_144, true),
            Preset::GptOss20b => ("gpt-oss", 201_088, 2880, 24, 64, 8, 2880, 131_072, false),
        };
        let (arch, gen) = preset_arch(arch);
        Shape {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            n_ctx,
            rope_freq_base: gen.rope_freq_base,
            rms_eps: gen.rms_eps,
            qkv_bias: gen.qkv_bias,
            tied_output: tied,
        }
    }
}

/// Hyperparameters of the model to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// Architecture.
    pub arch: Arch,
    /// Vocabulary size (rows of token_embd and output).
    pub n_vocab: u32,
    /// Embedding width.
    pub n_embd: u32,
    /// Number of blocks.
    pub n_layer: u32,
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads.
    pub n_head_kv: u32,
    /// Feed-forward width.
    pub n_ff: u32,
    /// Training context length.
    pub n_ctx: u32,
    /// Rope base frequency.
    pub rope_freq_base: f32,
    /// RMS norm epsilon.
    pub rms_eps: f32,
    /// Whether attn_q/k/v have biases.
    pub qkv_bias: bool,
    /// No `output.weight`: the output projection reuses token_embd.
    pub tied_output: bool,
}

/// Overrides of a preset, one per command-line flag.
#[derive(Clone, Debug, Default)]
pub struct ShapeOverrides {
    /// `--arch`: also resets eps, rope base and biases to the arch's defaults.
    pub arch: Option<Arch>,
    /// `--n-vocab`.
    pub n_vocab: Option<u32>,
    /// `--n-embd`.
    pub n_embd: Option<u32>,
    /// `--n-layer`.
    pub n_layer: Option<u32>,
    /// `--n-head`.
    pub n_head: Option<u32>,
    /// `--n-head-kv`.
    pub n_head_kv: Option<u32>,
    /// `--n-ff`.
    pub n_ff: Option<u32>,
    /// `--n-ctx`.
    pub n_ctx: Option<u32>,
    /// `--rope-freq-base`.
    pub rope_freq_base: Option<f32>,
    /// `--rms-eps`.
    pub rms_eps: Option<f32>,
    /// `--qkv-bias`.
    pub qkv_bias: Option<bool>,
    /// `--tied-output`.
    pub tied_output: Option<bool>,
}

impl Shape {
    /// The preset's shape with `o` applied, validated.
    pub fn resolve(preset: Preset, o: &ShapeOverrides) -> Result<Shape> {
        let mut s = preset.shape();
        if let Some(arch) = o.arch.filter(|&a| a != s.arch) {
            let gen = generator_of(arch)?;
            s.arch = arch;
            s.rms_eps = gen.rms_eps;
            s.rope_freq_base = gen.rope_freq_base;
            s.qkv_bias = gen.qkv_bias;
        }
        let set = |dst: &mut u32, v: Option<u32>| {
            if let Some(v) = v {
                *dst = v;
            }
        };
        set(&mut s.n_vocab, o.n_vocab);
        set(&mut s.n_embd, o.n_embd);
        set(&mut s.n_layer, o.n_layer);
        set(&mut s.n_head, o.n_head);
        set(&mut s.n_ff, o.n_ff);
        set(&mut s.n_ctx, o.n_ctx);
        // Changing the head count of a preset keeps multi-head attention
        // (n_head_kv = n_head) unless the kv head count is given too and
        // the preset's kv count no longer divides it.
        match o.n_head_kv {
            Some(v) => s.n_head_kv = v,
            None if s.n_head % s.n_head_kv.max(1) != 0 => s.n_head_kv = s.n_head,
            None => {}
        }
        if let Some(v) = o.rope_freq_base {
            s.rope_freq_base = v;
        }
        if let Some(v) = o.rms_eps {
            s.rms_eps = v;
        }
        if let Some(v) = o.qkv_bias {
            s.qkv_bias = v;
        }
        if let Some(v) = o.tied_output {
            s.tied_output = v;
        }
        s.validate()?;
        Ok(s)
    }

    /// Checks that the numbers describe a model llama.cpp can build.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Usage(m));
        for (flag, v) in [
            ("--n-vocab", self.n_vocab),
            ("--n-embd", self.n_embd),
            ("--n-layer", self.n_layer),
            ("--n-head", self.n_head),
            ("--n-head-kv", self.n_head_kv),
            ("--n-ff", self.n_ff),
            ("--n-ctx", self.n_ctx),
        ] {
            if v == 0 {
                return bad(format!("{flag} must be at least 1"));
            }
        }
        if self.n_embd % self.n_head != 0 {
            return bad(format!(
                "--n-embd {} is not a multiple of --n-head {}",
                self.n_embd, self.n_head
            ));
        }
        if self.n_head % self.n_head_kv != 0 {
            return bad(format!(
                "--n-head {} is not a multiple of --n-head-kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.head_dim() % 2 != 0 {
            return bad(format!(
                "head dimension {} must be even for rope",
                self.head_dim()
            ));
        }
        if !(self.rope_freq_base.is_finite() && self.rope_freq_base > 0.0) {
            return bad(format!(
                "--rope-freq-base {} must be positive",
                self.rope_freq_base
            ));
        }
        if self.qkv_bias && generator_of(self.arch)?.block.is_some() {
            return bad(format!(
                "--qkv-bias: {} has no attention biases",
                self.arch.name()
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return bad(format!("--rms-eps {} must be positive", self.rms_eps));
        }
        super::archs::ssm::validate(self)
    }

    /// Dimension of one attention head: `n_embd / n_head`, or the width
    /// the architecture fixes (see [`super::archs::head_dim`]).
    pub fn head_dim(&self) -> u32 {
        super::archs::head_dim(self).unwrap_or(self.n_embd / self.n_head)
    }

    /// Width of the key and value projections.
    pub fn n_embd_kv(&self) -> u32 {
        self.head_dim() * self.n_head_kv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid() {
        for p in [
            Preset::Stories260k,
            Preset::Tinyllama1_1b,
            Preset::Llama7b,
            Preset::Qwen2_0_5b,
            Preset::Mamba130m,
            Preset::Mamba2_370m,
            Preset::Granite4HMicro,
            Preset::Lfm2_350m,
            Preset::DeepseekV2Lite,
            Preset::GptOss20b,
            Preset::Rwkv7_0_4b,
        ] {
            p.shape().validate().unwrap();
        }
        let g = Preset::GptOss20b.shape();
        assert_eq!((g.head_dim(), g.n_embd_kv()), (64, 512));
        let q = Preset::Qwen2_0_5b.shape();
        assert_eq!((q.head_dim(), q.n_embd_kv()), (64, 128));
        assert!(q.qkv_bias && q.tied_output);
    }

    #[test]
    fn overrides() {
        let o = ShapeOverrides {
            n_embd: Some(128),
            n_head: Some(2),
            ..Default::default()
        };
        let s = Shape::resolve(Preset::Stories260k, &o).unwrap();
        assert_eq!(
            (s.n_embd, s.n_head, s.n_head_kv, s.n_vocab),
            (128, 2, 2, 512)
        );
        let o = ShapeOverrides {
            arch: Some(parse_arch("qwen2").unwrap()),
            ..Default::default()
        };
        let s = Shape::resolve(Preset::Stories260k, &o).unwrap();
        assert!(s.qkv_bias && !s.tied_output);
        assert_eq!(s.rms_eps, 1e-6);
        let o = ShapeOverrides {
            n_head: Some(3),
            ..Default::default()
        };
        assert!(Shape::resolve(Preset::Stories260k, &o).is_err());
        let o = ShapeOverrides {
            n_layer: Some(0),
            ..Default::default()
        };
        let e = Shape::resolve(Preset::Stories260k, &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--n-layer"), "{e}");
    }

    #[test]
    fn arch_names_come_from_the_registry() {
        for arch in llama::Arch::all() {
            match generator(arch) {
                Some(_) => assert_eq!(parse_arch(arch.name()).unwrap(), arch),
                None => {
                    let e = parse_arch(arch.name()).unwrap_err().to_string();
                    assert!(e.contains("cannot write") && e.contains("llama"), "{e}");
                }
            }
        }
        let e = parse_arch("mamba9").unwrap_err().to_string();
        assert!(e.contains("'mamba9'") && e.contains("qwen2"), "{e}");
    }
}
