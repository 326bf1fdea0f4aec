//! Backend options, read from the environment by [`Options::from_env`].

/// How the backend picks devices and sizes buffers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Also expose software devices (lavapipe, SwiftShader):
    /// `GGML_VK_ALLOW_CPU_DEVICES=1`.
    pub allow_cpu_devices: bool,
    /// Physical device indices (in the driver's enumeration order) to expose,
    /// in this order; an index may repeat: `GGML_VK_VISIBLE_DEVICES=0,1`.
    pub visible_devices: Option<Vec<usize>>,
    /// Enable `VK_LAYER_KHRONOS_validation` and turn its errors into
    /// [`crate::take_validation_errors`] entries: `GGML_VK_VALIDATE=1`.
    pub validation: bool,
    /// Cap on a single device buffer (bytes), below the device limits:
    /// `GGML_VK_MAX_BUFFER_SIZE`.
    pub max_buffer_size: Option<usize>,
    /// Cap on a storage-buffer binding (bytes), below the device limit:
    /// `GGML_VK_MAX_BINDING_SIZE`.
    pub max_binding_size: Option<usize>,
    /// Always move data through staging buffers, even when device memory
    /// is host-visible: `GGML_VK_FORCE_STAGING=1`.
    pub force_staging: bool,
    /// Do not use subgroup operations: `GGML_VK_DISABLE_SUBGROUPS=1`.
    pub disable_subgroups: bool,
    /// Device memory budget (bytes) of every device: it reports at most
    /// this much memory, less what it has allocated, and refuses device
    /// allocations beyond it with an out-of-memory error:
    /// `GGML_VK_MAX_MEMORY_MIB` (in MiB).
    pub max_memory: Option<usize>,
    /// Time every dispatch on the GPU (timestamp queries) and print, when
    /// the backend is dropped, the time per shader with the bytes it
    /// touched, and the host's share of each graph: `GGML_VK_PERF_LOGGER=1`.
    pub perf_logger: bool,
    /// Do not use integer dot products (VK_KHR_shader_integer_dot_product)
    /// even where the device has them: `GGML_VK_DISABLE_INTEGER_DOT=1`.
    pub disable_integer_dot: bool,
    /// Record every graph anew instead of submitting the command buffers
    /// of an unchanged graph again: `GGML_VK_DISABLE_REPLAY=1`.
    pub disable_replay: bool,
    /// Fusions switched off (see [`Fusions`]): `GGML_VK_DISABLE_FUSION=1`
    /// (all) or a comma-separated list of `rms_norm`, `multi`, `add`, `glu`.
    pub disable_fusion: Fusions,
}

/// Kinds of fusion of graph nodes into one dispatch, each on unless
/// switched off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fusions {
    /// RMS_NORM and its MUL by a weight inside the matrix x vector
    /// products that read the result.
    pub rms_norm: bool,
    /// Several matrix x vector products of one b in one dispatch.
    pub multi: bool,
    /// A matrix x vector product and the ADD of a bias or residual.
    pub add: bool,
    /// Two matrix x vector products and the gated unit of their results.
    pub glu: bool,
}

impl Fusions {
    /// Every fusion switched off.
    pub const ALL: Fusions = Fusions {
        rms_norm: true,
        multi: true,
        add: true,
        glu: true,
    };

    /// The kinds named in `GGML_VK_DISABLE_FUSION`'s value: `1`/`all` for
    /// every kind, `0` or nothing for none, else a comma-separated list
    /// (unknown names are reported and ignored).
    pub fn parse(v: &str) -> Fusions {
        let v = v.trim();
        match v {
            "" | "0" => return Fusions::default(),
            "1" | "all" => return Fusions::ALL,
            _ => {}
        }
        let mut f = Fusions::default();
        for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "rms_norm" => f.rms_norm = true,
                "multi" => f.multi = true,
                "add" => f.add = true,
                "glu" => f.glu = true,
                _ => eprintln!(
                    "ggml_vulkan: GGML_VK_DISABLE_FUSION: unknown kind '{name}' (rms_norm, multi, add, glu), ignored"
                ),
            }
        }
        f
    }

    /// True when every kind is switched off.
    pub fn all_off(&self) -> bool {
        *self == Fusions::ALL
    }
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

impl Options {
    /// Options from the `GGML_VK_*` environment variables. Validation is
    /// also on when `VK_INSTANCE_LAYERS` names the validation layer.
    pub fn from_env() -> Options {
        let visible_devices = std::env::var("GGML_VK_VISIBLE_DEVICES")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.split(',')
                    .filter_map(|x| match x.trim().parse::<usize>() {
                        Ok(i) => Some(i),
                        Err(_) => {
                            eprintln!(
                                "ggml_vulkan: GGML_VK_VISIBLE_DEVICES: '{x}' is not an index, ignored"
                            );
                            None
                        }
                    })
                    .collect()
            });
        let validation = flag("GGML_VK_VALIDATE")
            || std::env::var("VK_INSTANCE_LAYERS")
                .is_ok_and(|l| l.contains("VK_LAYER_KHRONOS_validation"));
        Options {
            allow_cpu_devices: flag("GGML_VK_ALLOW_CPU_DEVICES"),
            visible_devices,
            validation,
            max_buffer_size: std::env::var("GGML_VK_MAX_BUFFER_SIZE")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            max_binding_size: std::env::var("GGML_VK_MAX_BINDING_SIZE")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            force_staging: flag("GGML_VK_FORCE_STAGING"),
            disable_subgroups: flag("GGML_VK_DISABLE_SUBGROUPS"),
            perf_logger: flag("GGML_VK_PERF_LOGGER"),
            disable_integer_dot: flag("GGML_VK_DISABLE_INTEGER_DOT"),
            disable_replay: flag("GGML_VK_DISABLE_REPLAY"),
            disable_fusion: std::env::var("GGML_VK_DISABLE_FUSION")
                .map(|v| Fusions::parse(&v))
                .unwrap_or_default(),
            max_memory: std::env::var("GGML_VK_MAX_MEMORY_MIB").ok().and_then(|s| {
                match s.trim().parse::<usize>() {
                    Ok(mib) => Some(mib.saturating_mul(1 << 20)),
                    Err(_) => {
                        eprintln!(
                            "ggml_vulkan: GGML_VK_MAX_MEMORY_MIB: '{s}' is not a number of MiB, ignored"
                        );
                        None
                    }
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_switches_parse() {
        assert_eq!(Fusions::parse(""), Fusions::default());
        assert_eq!(Fusions::parse("0"), Fusions::default());
        assert_eq!(Fusions::parse("1"), Fusions::ALL);
        assert_eq!(Fusions::parse("all"), Fusions::ALL);
        let f = Fusions::parse("glu, add,nonsense");
        assert!(f.glu && f.add && !f.multi && !f.rms_norm);
        assert!(!f.all_off());
        assert!(Fusions::parse("rms_norm,multi,add,glu").all_off());
    }
}
