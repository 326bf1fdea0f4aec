//! Compiles the GLSL shaders into `spv/` and writes `src/table.rs`.
//!
//! `build-spirv [--check] [--glslc PATH]`: with `--check`, compiles into a
//! temporary directory and fails when the committed files differ.

use std::fs;
use std::process::ExitCode;

use shaders::generate::{
    compile_all, diff_dirs, glsl_dir, glslc_version, spv_dir, table_path, table_source,
};
use shaders::variants::{self, source_hash};

fn run() -> Result<(), String> {
    let mut check = false;
    let mut glslc = std::env::var("GLSLC").unwrap_or_else(|_| "glslc".to_string());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--glslc" => glslc = args.next().ok_or("--glslc needs a path")?,
            _ => {
                return Err(format!(
                    "unknown argument {a}; usage: build-spirv [--check] [--glslc PATH]"
                ))
            }
        }
    }
    let version = glslc_version(&glslc).ok_or_else(|| format!("cannot run {glslc} --version"))?;
    let hash = source_hash(&glsl_dir()).map_err(|e| format!("reading GLSL sources: {e}"))?;
    let table = table_source(hash, &version);
    if check {
        let tmp = std::env::temp_dir().join(format!("shaders-check-{}", std::process::id()));
        let res = compile_all(&glslc, &tmp);
        let stale = res.map(|()| diff_dirs(&variants::all(), &tmp, &spv_dir()));
        let _ = fs::remove_dir_all(&tmp);
        let stale = stale?;
        let committed = fs::read_to_string(table_path()).unwrap_or_default();
        if !stale.is_empty() || committed != table {
            return Err(format!(
                "committed SPIR-V is stale ({} modules differ{}); run `cargo run -p shaders --bin build-spirv`",
                stale.len(),
                if committed != table { ", table differs" } else { "" }
            ));
        }
        println!("{} SPIR-V modules are up to date", variants::all().len());
        return Ok(());
    }
    // Compile next to spv/ first, so that a failure leaves it untouched.
    let out = spv_dir();
    let tmp = out.with_file_name("spv.new");
    let _ = fs::remove_dir_all(&tmp);
    if let Err(e) = compile_all(&glslc, &tmp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if out.exists() {
        fs::remove_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
    fs::write(table_path(), table).map_err(|e| format!("writing table: {e}"))?;
    println!("wrote {} SPIR-V modules ({version})", variants::all().len());
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("build-spirv: {e}");
            ExitCode::FAILURE
        }
    }
}
