//! What the machine is: CPU model, cores, SIMD features, last-level cache.

use serde_json::json;

/// Logical cores this process may use.
pub fn logical_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The CPU's model name, when the OS says.
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Size in bytes of the largest cache of CPU 0, when the OS says.
pub fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|s| parse_size(s.trim()))
        .max()
}

/// Parses `32768K`, `2M`, `512`.
fn parse_size(s: &str) -> Option<usize> {
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// SIMD features relevant to the kernels, as detected at run time.
pub fn simd_features() -> Vec<&'static str> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") {
            v.push("avx2");
        }
        if is_x86_feature_detected!("fma") {
            v.push("fma");
        }
        if is_x86_feature_detected!("f16c") {
            v.push("f16c");
        }
        if is_x86_feature_detected!("avx512f") {
            v.push("avx512f");
        }
        if is_x86_feature_detected!("avx512bw") {
            v.push("avx512bw");
        }
        if is_x86_feature_detected!("avx512vnni") {
            v.push("avx512vnni");
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            v.push("neon");
        }
    }
    v
}

/// Physical memory in bytes (MemTotal), when the OS says.
pub fn memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The 1, 5 and 15 minute load averages, when the OS says: other work
/// that shares the cores lowers every figure.
pub fn load_average() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// `1.20 0.80 0.50`, or `unknown`.
pub fn load_line(load: Option<[f64; 3]>) -> String {
    match load {
        Some([a, b, c]) => format!("{a:.2} {b:.2} {c:.2}"),
        None => "unknown".into(),
    }
}

/// One line for report headers.
pub fn summary() -> String {
    let mem = memory_bytes()
        .map(|b| format!(", {:.0} GiB", b as f64 / (1u64 << 30) as f64))
        .unwrap_or_default();
    format!(
        "{}, {} logical cores{mem}, {}",
        cpu_model().unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        logical_cores(),
        simd_features().join(" ")
    )
}

/// The host as JSON.
pub fn json() -> serde_json::Value {
    json!({
        "cpu": cpu_model(),
        "arch": std::env::consts::ARCH,
        "os": std::env::consts::OS,
        "logical_cores": logical_cores(),
        "simd": simd_features(),
        "last_level_cache_bytes": last_level_cache_bytes(),
        "memory_bytes": memory_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        assert_eq!(load_line(Some([1.0, 0.5, 0.25])), "1.00 0.50 0.25");
        assert_eq!(load_line(None), "unknown");
        if let Some(l) = load_average() {
            assert!(l.iter().all(|x| *x >= 0.0));
        }
    }
}
