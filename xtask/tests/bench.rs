//! The bench code paths on tiny inputs: MUL_MAT rows with their bounds, an
//! e2e test in process and through the child process, the load suites, and
//! flag errors.
//! Only that the paths work is checked here; the figures are benches' work.

mod common;

use std::time::Duration;

use clap::Parser;
use ggml_core::Type;
use xtask::bench::e2e::{run_case, Case, Generation};
use xtask::bench::load::{CpuLoad, GgufOpen, SequentialRead, VulkanLoad};
use xtask::bench::matmul::{run_config, Config, Sampling};
use xtask::bench::report::Row;
use xtask::bench::{BenchOptions, Suite};
use xtask::cli::{Cli, Command};
use xtask::gen_model::shape::{Preset, ShapeOverrides};
use xtask::gen_model::{generate_file, WriteSettings};
use xtask::Error;

/// STREAM and FMA rows as the suites before the measured ones leave them.
fn prior() -> Vec<Row> {
    let mut rows = Vec::new();
    for t in [1, 2] {
        rows.push(Row::new("stream", "triad", Some(t), 8.0, "GB/s", ""));
        rows.push(Row::new("stream", "read", Some(t), 10.0, "GB/s", ""));
        rows.push(Row::new("fma", "avx2 fma", Some(t), 50.0, "GFLOP/s", ""));
        rows.push(Row::new("fma", "avx512 fma", Some(t), 100.0, "GFLOP/s", ""));
    }
    rows
}

#[test]
fn kernels_on_tiny_shapes() {
    let quick = Sampling {
        min_samples: 1,
        target: Duration::ZERO,
    };
    let cfg = Config {
        types: vec![Type::F16, Type::Q4_0, Type::Q6_K],
        shapes: vec![(256, 32)],
        matmul_cols: 4,
        threads: vec![1, 2],
        streamed_bytes: 64 << 10,
        matvec_sampling: quick,
        matmul_sampling: quick,
    };
    let rows = run_config(&cfg, &prior()).expect("kernels run");
    // Matvec rows from repacked weights come where this CPU stores the type
    // repacked: F16, Q4_0 and Q6_K from AVX2 up.
    let repacked: Vec<&Row> = rows
        .iter()
        .filter(|r| r.case.ends_with(" repacked"))
        .collect();
    assert_eq!(rows.len() - repacked.len(), 12);
    for r in &repacked {
        assert_eq!(r.suite, "matvec", "{r:?}");
        assert!(r.note.contains("CPU_REPACK"), "{r:?}");
    }
    let f = ggml_cpu::features::cpu_features();
    if f.avx2 && std::env::var_os("GGML_CPU_ISA").is_none() {
        let cases: Vec<&str> = repacked.iter().map(|r| r.case.as_str()).collect();
        assert_eq!(
            cases,
            [
                "f16 256x32 repacked",
                "f16 256x32 repacked",
                "q4_0 256x32 repacked",
                "q4_0 256x32 repacked",
                "q6_K 256x32 repacked",
                "q6_K 256x32 repacked"
            ]
        );
    }
    for r in &rows {
        assert!(r.value > 0.0 && r.value.is_finite(), "{r:?}");
        let want = if r.suite == "matvec" { 10.0 } else { 100.0 };
        assert_eq!(r.bound, Some(want), "{r:?}");
    }
    assert_eq!(rows[0].case, "f16 256x32");
    let first_matmul = rows.iter().position(|r| r.suite == "matmul").unwrap();
    assert_eq!(rows[first_matmul].case, "f16 256x32x4");
}

#[test]
fn kernel_types_come_from_the_flag() {
    let opts = BenchOptions {
        types: vec!["q4_k_m".parse().unwrap(), "q4_k".parse().unwrap()],
        quick: true,
        ..BenchOptions::default()
    };
    let cfg = Config::from_options(&opts).unwrap();
    assert_eq!(cfg.types, vec![Type::Q4_K]);
    let opts = BenchOptions {
        types: vec!["q3_k_m".parse().unwrap()],
        ..BenchOptions::default()
    };
    assert_eq!(Config::from_options(&opts).unwrap().types, vec![Type::Q3_K]);
    assert_eq!(
        Config::from_options(&BenchOptions::default())
            .unwrap()
            .types,
        ggml_core::MATMUL_TYPES
    );
}

fn stories_model(test: &str) -> std::path::PathBuf {
    let dir = common::temp_dir(test);
    let spec = common::spec(Preset::Stories260k, ShapeOverrides::default(), "f32", 5);
    let path = dir.join("stories.gguf");
    generate_file(&spec, &WriteSettings::default(), &path).expect("model");
    path
}

#[test]
fn e2e_case_in_process() {
    let model = stories_model("e2e-in-process");
    for (n_prompt, n_gen) in [(16, 0), (0, 6)] {
        let case = Case {
            model: model.clone(),
            threads: 2,
            n_prompt,
            n_gen,
            reps: 2,
            vulkan: false,
        };
        let r = run_case(&case).expect("case");
        assert_eq!(r.backend, "CPU");
        assert_eq!(r.n_tokens, n_prompt + n_gen);
        assert_eq!(r.samples_ns.len(), 2);
        assert!(r.bytes_per_token > 0.0 && r.flops_per_token > 0.0);
        // The output layer is tied to the embeddings in stories260k: a
        // generated token reads every tensor once.
        assert!(r.bytes_per_token <= r.model_bytes as f64);
        assert!(r.model_desc.starts_with("llama"), "{}", r.model_desc);
    }
    let _ = std::fs::remove_dir_all(model.parent().unwrap());
}

#[test]
fn e2e_suite_through_child_processes() {
    let model = stories_model("e2e-child");
    let opts = BenchOptions {
        model: Some(model.clone()),
        threads: vec![1],
        quick: true,
        reps: 1,
        ..BenchOptions::default()
    };
    let suite = Generation::with_exe(env!("CARGO_BIN_EXE_xtask"));
    let rows = suite.run(&opts, &prior()).expect("e2e suite");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].suite, "pp64");
    assert_eq!(rows[1].suite, "tg16");
    for r in &rows {
        assert_eq!(r.threads, Some(1));
        assert!(r.value > 0.0, "{r:?}");
        assert!(r.bound.is_some_and(|b| b > 0.0), "{r:?}");
        assert!(r.note.contains("peak RSS"), "{}", r.note);
    }
    let _ = std::fs::remove_dir_all(model.parent().unwrap());
}

#[test]
fn load_suites_on_a_small_model() {
    let model = stories_model("load");
    let opts = BenchOptions {
        model: Some(model.clone()),
        quick: true,
        ..BenchOptions::default()
    };
    let mut rows: Vec<Row> = Vec::new();
    for suite in [
        &SequentialRead as &dyn Suite,
        &GgufOpen,
        &CpuLoad,
        &VulkanLoad,
    ] {
        let new = suite
            .run(&opts, &rows)
            .unwrap_or_else(|e| panic!("{}: {e}", suite.name()));
        rows.extend(new);
    }
    let cases: Vec<&str> = rows.iter().map(|r| r.case.as_str()).collect();
    assert_eq!(
        &cases[..13],
        [
            "sequential cold",
            "sequential warm",
            "sequential warm, fresh memory",
            "GgufFile::open best",
            "GgufFile::open median",
            "CPU, mmap on, no repack, cold",
            "CPU, mmap on, no repack, warm",
            "CPU, mmap off, no repack, cold",
            "CPU, mmap off, no repack, warm",
            "CPU, direct I/O, no repack, cold",
            "CPU, direct I/O, no repack, warm",
            "CPU, mmap on, repacked, cold",
            "CPU, mmap on, repacked, warm",
        ]
    );
    // Vulkan rows only with a device (lavapipe with GGML_VK_ALLOW_CPU_DEVICES=1).
    assert!(rows.len() == 13 || rows.len() == 19, "{cases:?}");
    for r in &rows {
        assert!(r.value > 0.0 && r.value.is_finite(), "{r:?}");
    }
    for r in rows.iter().filter(|r| r.suite == "model") {
        // Loads that read every weight (buffered or direct, or every
        // repacked one) are compared with the sequential read.
        let reads = r.case.contains("mmap off")
            || r.case.contains("direct I/O")
            || r.case.contains("repacked");
        assert_eq!(r.bound.is_some(), reads, "{r:?}");
        assert!(r.note.contains(" s"), "{}", r.note);
    }
    let _ = std::fs::remove_dir_all(model.parent().unwrap());
}

#[test]
fn bad_flags_are_errors_not_panics() {
    for args in [
        &["xtask", "bench", "kernels", "--types", "q9_0"][..],
        &["xtask", "bench", "e2e", "--reps", "x"],
        &["xtask", "bench", "nothing"],
        &["xtask", "bench-case", "--threads", "1"],
    ] {
        assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
    }
    let run = |args: &[&str]| xtask::cli::run(Cli::try_parse_from(args).expect("parses"));
    assert!(matches!(
        run(&["xtask", "bench", "e2e", "--reps", "0"]),
        Err(Error::Usage(_))
    ));
    assert!(matches!(
        run(&["xtask", "bench", "kernels", "--threads", "0"]),
        Err(Error::Usage(_))
    ));
    assert!(matches!(
        run(&["xtask", "bench-case", "--model", "m.gguf", "--threads", "1"]),
        Err(Error::Usage(_))
    ));
    assert!(matches!(
        run(&["xtask", "bench", "all", "--model", "/nonexistent.gguf"]),
        Err(Error::Usage(_))
    ));
    let dir = std::env::temp_dir();
    let dir = dir.to_str().expect("a UTF-8 temporary folder");
    for which in ["load", "e2e"] {
        match run(&["xtask", "bench", which, "--model", dir]) {
            Err(Error::Usage(m)) => assert!(m.contains("is not a file"), "{m}"),
            other => panic!("bench {which} --model <folder>: {other:?}"),
        }
    }
    assert!(matches!(
        run(&["xtask", "shaders", "--check", "--glslc", "no/such/glslc"]),
        Err(Error::Usage(_))
    ));
    let cli = Cli::try_parse_from(["xtask", "bench", "e2e", "--vulkan", "--types", "f16,q4_0"])
        .expect("parses");
    match cli.command {
        Command::Bench(b) => {
            assert!(b.vulkan);
            assert_eq!(b.types.len(), 2);
            assert_eq!(b.reps, 3);
        }
        _ => panic!("not a bench command"),
    }
}
