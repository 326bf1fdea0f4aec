//! Run-time detection of the SIMD instruction sets the kernels can use.
//!
//! Every kernel family has a scalar path that always exists; vector paths are
//! chosen once per process from what the CPU reports, and tests can ask for a
//! lower level explicitly to compare the paths.

use std::sync::OnceLock;

/// A SIMD level, ordered from least to most capable on each architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust, no intrinsics.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL/DQ (+ VNNI when present) on top of AVX2.
    Avx512,
    /// aarch64 NEON (Advanced SIMD).
    Neon,
}

impl Isa {
    /// Short name for logs and benches.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }
}

/// What the CPU offers, as far as the kernels care.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX2, FMA and F16C together.
    pub avx2: bool,
    /// AVX-512 F, BW, VL and DQ together (and AVX2).
    pub avx512: bool,
    /// AVX-512 VNNI (with VL).
    pub avx512_vnni: bool,
    /// AVX-512 BF16.
    pub avx512_bf16: bool,
    /// NEON.
    pub neon: bool,
}

/// The features of this CPU, detected once.
pub fn cpu_features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    let avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    let avx512 = avx2
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512dq");
    CpuFeatures {
        avx2,
        avx512,
        avx512_vnni: avx512 && is_x86_feature_detected!("avx512vnni"),
        avx512_bf16: avx512 && is_x86_feature_detected!("avx512bf16"),
        neon: false,
    }
}

#[cfg(target_arch = "aarch64")]
fn detect() -> CpuFeatures {
    CpuFeatures {
        neon: std::arch::is_aarch64_feature_detected!("neon"),
        ..CpuFeatures::default()
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

/// Who made the CPU and which family it is, for choices that differ by
/// microarchitecture rather than by instruction set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuKind {
    /// An AMD CPU ("AuthenticAMD").
    pub amd: bool,
    /// An Intel CPU ("GenuineIntel").
    pub intel: bool,
    /// The family (CPUID's base family plus its extended family).
    pub family: u32,
}

/// The kind of this CPU, detected once.
pub fn cpu_kind() -> CpuKind {
    static KIND: OnceLock<CpuKind> = OnceLock::new();
    *KIND.get_or_init(detect_kind)
}

#[cfg(target_arch = "x86_64")]
fn detect_kind() -> CpuKind {
    let (v, f) = (std::arch::x86_64::__cpuid(0), std::arch::x86_64::__cpuid(1));
    let mut vendor = [0u8; 12];
    vendor[..4].copy_from_slice(&v.ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&v.edx.to_le_bytes());
    vendor[8..].copy_from_slice(&v.ecx.to_le_bytes());
    let base = (f.eax >> 8) & 0xf;
    let family = if base == 0xf {
        base + ((f.eax >> 20) & 0xff)
    } else {
        base
    };
    CpuKind {
        amd: &vendor == b"AuthenticAMD",
        intel: &vendor == b"GenuineIntel",
        family,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_kind() -> CpuKind {
    CpuKind::default()
}

/// The best level this CPU supports.
pub fn best_isa() -> Isa {
    let f = cpu_features();
    if f.avx512 {
        Isa::Avx512
    } else if f.avx2 {
        Isa::Avx2
    } else if f.neon {
        Isa::Neon
    } else {
        Isa::Scalar
    }
}

/// The level the kernels use: [`best_isa`], unless the environment variable
/// `GGML_CPU_ISA` names another level this CPU can run.
pub fn selected_isa() -> Isa {
    let wanted = std::env::var("GGML_CPU_ISA").ok();
    available_isas()
        .into_iter()
        .find(|i| {
            wanted
                .as_deref()
                .is_some_and(|w| w.eq_ignore_ascii_case(i.name()))
        })
        .unwrap_or_else(best_isa)
}

/// Every level this CPU can run, scalar first.
pub fn available_isas() -> Vec<Isa> {
    let f = cpu_features();
    let mut v = vec![Isa::Scalar];
    if f.avx2 {
        v.push(Isa::Avx2);
    }
    if f.avx512 {
        v.push(Isa::Avx512);
    }
    if f.neon {
        v.push(Isa::Neon);
    }
    v
}

/// True when this CPU can run `isa`.
pub fn is_available(isa: Isa) -> bool {
    available_isas().contains(&isa)
}

/// Feature names and values for the registration's `features()` (as
/// llama.cpp's system info prints them).
pub fn feature_list() -> Vec<(String, String)> {
    let f = cpu_features();
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    vec![
        ("AVX2".into(), flag(f.avx2)),
        ("AVX512".into(), flag(f.avx512)),
        ("AVX512_VNNI".into(), flag(f.avx512_vnni)),
        ("AVX512_BF16".into(), flag(f.avx512_bf16)),
        ("NEON".into(), flag(f.neon)),
        ("KERNELS".into(), selected_isa().name().into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_consistent() {
        let isas = available_isas();
        assert_eq!(isas[0], Isa::Scalar);
        assert!(isas.contains(&best_isa()));
        assert!(isas.contains(&selected_isa()));
        #[cfg(target_arch = "aarch64")]
        assert!(isas.contains(&Isa::Neon), "NEON is part of AArch64");
        let f = cpu_features();
        assert!(!f.avx512 || f.avx2);
    }
}
