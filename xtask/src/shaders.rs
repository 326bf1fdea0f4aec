//! `shaders`: rebuilds the committed SPIR-V of the `shaders` crate from its
//! GLSL sources, or checks that it is up to date.
//!
//! The work is the `shaders` crate's `build-spirv` program (what
//! `crates/shaders/build-spirv.sh` runs); this task runs it through cargo
//! from the workspace root, so that it works from any folder.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Compile into a temporary folder and fail when the committed files
    /// differ, instead of rewriting them.
    pub check: bool,
    /// The glslc to run (default: `$GLSLC`, else `glslc` on the PATH).
    pub glslc: Option<PathBuf>,
}

/// The arguments of `cargo` that run `build-spirv` with `opts`.
pub fn cargo_args(opts: &Options) -> Vec<OsString> {
    let mut v: Vec<OsString> = [
        "run",
        "--quiet",
        "-p",
        "shaders",
        "--bin",
        "build-spirv",
        "--",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if opts.check {
        v.push("--check".into());
    }
    if let Some(g) = &opts.glslc {
        v.push("--glslc".into());
        v.push(g.as_os_str().to_owned());
    }
    v
}

/// Runs `build-spirv` from the workspace `root`.
pub fn run(root: &Path, opts: &Options) -> Result<()> {
    if let Some(g) = &opts.glslc {
        if g.components().count() > 1 && !g.is_file() {
            return Err(Error::Usage(format!(
                "--glslc '{}' is not a file",
                g.display()
            )));
        }
    }
    crate::cargo(root, &cargo_args(opts), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let s = |o: &Options| {
            cargo_args(o)
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            s(&Options::default()),
            "run --quiet -p shaders --bin build-spirv --"
        );
        let o = Options {
            check: true,
            glslc: Some("/opt/glslc".into()),
        };
        assert_eq!(
            s(&o),
            "run --quiet -p shaders --bin build-spirv -- --check --glslc /opt/glslc"
        );
    }

    #[test]
    fn a_missing_glslc_path_is_a_usage_error() {
        let o = Options {
            check: true,
            glslc: Some("no/such/glslc".into()),
        };
        let e = run(Path::new("."), &o).unwrap_err();
        assert!(matches!(e, Error::Usage(_)), "{e}");
        assert!(e.to_string().contains("no/such/glslc"), "{e}");
    }
}
