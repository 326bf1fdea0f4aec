//! The committed SPIR-V must match the GLSL sources.
//!
//! The source hash check needs nothing: any change of a GLSL file or of the
//! variant list without regenerating fails it. The byte-for-byte
//! regeneration needs the glslc that built the committed files and is
//! skipped without it, unless `REQUIRE_GLSLC=1`; it compiles one variant of
//! each source (all of them with `SHADERS_FULL_CHECK=1`, as
//! `build-spirv --check` does).

use shaders::generate::{compile, diff_dirs, glsl_dir, glslc_version, spv_dir};
use shaders::variants::{self, source_hash};

const HOW: &str = "regenerate with `cargo run -p shaders --bin build-spirv`";

#[test]
fn sources_match_the_committed_hash() {
    let hash = source_hash(&glsl_dir()).expect("reading glsl/");
    assert_eq!(
        hash,
        shaders::SOURCE_HASH,
        "GLSL sources or variants changed since the SPIR-V was built; {HOW}"
    );
}

#[test]
fn regenerated_spirv_is_identical() {
    let required = std::env::var("REQUIRE_GLSLC").is_ok_and(|v| v == "1");
    let glslc = std::env::var("GLSLC").unwrap_or_else(|_| "glslc".to_string());
    let Some(version) = glslc_version(&glslc) else {
        assert!(!required, "REQUIRE_GLSLC=1 but {glslc} cannot be run");
        eprintln!("skipped: no glslc");
        return;
    };
    if version != shaders::GLSLC_VERSION {
        assert!(
            !required,
            "REQUIRE_GLSLC=1 but {glslc} is '{version}', the SPIR-V was built by '{}'",
            shaders::GLSLC_VERSION
        );
        eprintln!(
            "skipped: glslc is '{version}', the SPIR-V was built by '{}'",
            shaders::GLSLC_VERSION
        );
        return;
    }
    let mut picked = variants::all();
    if std::env::var("SHADERS_FULL_CHECK").map_or(true, |v| v != "1") {
        let mut seen = Vec::new();
        picked.retain(|v| {
            let first = !seen.contains(&v.source);
            seen.push(v.source);
            first
        });
    }
    let tmp = std::env::temp_dir().join(format!("shaders-test-{}", std::process::id()));
    let res = compile(&glslc, &picked, &tmp);
    let stale = res.map(|()| diff_dirs(&picked, &tmp, &spv_dir()));
    let _ = std::fs::remove_dir_all(&tmp);
    let stale = stale.expect("compiling the shaders");
    assert!(stale.is_empty(), "stale SPIR-V: {stale:?}; {HOW}");
}
