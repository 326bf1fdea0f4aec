//! `llama-fit-params`: the fitted flags on stdout, which the tools parse
//! back into the same plan; `--fit-print on` prints that plan; bad input
//! (no model, a missing file, an unknown flag, a bad value) is a clear
//! error with a failing exit status.

mod common;

use std::process::{Command, Output};

use common::fixtures;
use llama::cli::CommonArgs;
use llama::{Model, ModelParams};

fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llama-fit-params"))
        .args(args)
        // The CPU alone: what it prints does not depend on the machine's
        // GPUs.
        .env_remove("GGML_VK_ALLOW_CPU_DEVICES")
        .output()
        .expect("llama-fit-params runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn prints_flags_that_parse_back_into_the_plan() {
    let Some(fx) = fixtures() else { return };
    let model = fx.join("models/stories260K.gguf");
    let m = model.to_str().unwrap();
    for given in [vec![], vec!["-c", "1024"], vec!["-c", "512", "-ub", "64"]] {
        let mut args = vec!["-m", m, "-dev", "none", "--log-disable"];
        args.extend(&given);
        let out = tool(&args);
        assert!(out.status.success(), "{given:?}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let line = stdout.trim_end();
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        assert!(line.starts_with("-c ") && line.contains(" -ngl "), "{line}");
        // The flags, with the model's, give the plan --fit-print prints.
        let mut again: Vec<String> = ["-m", m, "-dev", "none"].map(String::from).to_vec();
        again.extend(line.split(' ').map(String::from));
        again.extend(given.iter().skip(2).map(|s| s.to_string()));
        let parsed = CommonArgs::parse(again).unwrap();
        let plan = Model::plan(&model, &parsed.model_params, &parsed.ctx_params).unwrap();
        let mut args = args.clone();
        args.extend(["--fit-print", "on"]);
        let printed = tool(&args);
        assert!(printed.status.success(), "{}", text(&printed.stderr));
        assert_eq!(text(&printed.stdout), plan.to_string(), "{given:?}");
        if let Some(c) = given.get(1) {
            assert!(line.starts_with(&format!("-c {c} ")), "{line}");
        }
    }
    // The same model, fitted or not, is the same plan when it fits.
    let off = tool(&["-m", m, "-dev", "none", "-fit", "off", "-fitp", "on"]);
    let plan = Model::plan(
        &model,
        &ModelParams {
            devices: Some(Vec::new()),
            ..CommonArgs::default().model_params
        },
        &CommonArgs::default().ctx_params,
    )
    .unwrap();
    assert_eq!(text(&off.stdout), plan.to_string());
}

#[test]
fn bad_input_is_a_clear_error() {
    let Some(fx) = fixtures() else { return };
    let model = fx.join("models/stories260K.gguf");
    let m = model.to_str().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&[], "no model given"),
        (
            &["-m", "/nonexistent/model.gguf"],
            "/nonexistent/model.gguf",
        ),
        (&["-m", m, "--bogus"], "unknown argument: --bogus"),
        (&["-m", m, "--fit-print", "maybe"], "expected on or off"),
        (&["-m", m, "-fitp"], "needs a value"),
        (&["-m", m, "-fitt", "lots"], "-fitt"),
    ];
    for (args, want) in cases {
        let out = tool(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("error") && err.contains(want),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
    let help = tool(&["--help"]);
    assert!(help.status.success() && text(&help.stdout).contains("--fit-print"));
}
