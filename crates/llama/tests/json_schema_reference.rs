//! JSON schema to grammar against llama.cpp: every schema in
//! tests/data/json_schema gives exactly the grammar text llama.cpp's
//! converter wrote for it, and llama-cli's greedy output under a schema is
//! llama-completion's (README there).

use std::path::PathBuf;

use llama::json_schema::json_schema_to_grammar;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/json_schema")
}

#[test]
fn every_schema_gives_llama_cpp_grammar_text() {
    let mut names: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .expect("the schema data folder")
        .map(|e| e.expect("a folder entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| !p.ends_with("outputs.json"))
        .collect();
    names.sort();
    assert!(names.len() >= 40, "only {} schemas", names.len());
    let mut failures = Vec::new();
    for path in &names {
        let text = std::fs::read_to_string(path).expect("a schema file");
        let schema: serde_json::Value = serde_json::from_str(&text).expect("schema JSON");
        let expected = std::fs::read_to_string(path.with_extension("gbnf")).expect("its grammar");
        match json_schema_to_grammar(&schema) {
            Ok(got) if got == expected => {}
            Ok(got) => failures.push(format!(
                "{}:\n--- llama.cpp\n{expected}--- ours\n{got}",
                path.display()
            )),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} schemas differ:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}

#[test]
fn composed_grammars_give_llama_cpp_build_grammar_text() {
    let dir = data_dir().join("builder");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the builder data folder")
        .map(|e| e.expect("a folder entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    assert!(names.len() >= 4);
    for path in &names {
        let ops: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let got = llama::json_schema::build_grammar(|b| {
            for op in ops.as_array().unwrap() {
                let name = op[1].as_str().unwrap();
                match op[0].as_str().unwrap() {
                    "rule" => {
                        b.add_rule(name, op[2].as_str().unwrap());
                    }
                    _ => {
                        b.add_schema(name, &op[2])?;
                    }
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let want = std::fs::read_to_string(path.with_extension("gbnf")).unwrap();
        assert_eq!(got, want, "{}", path.display());
    }
}

/// What llama-completion generated: its stdout without the two final line
/// breaks and the end-of-text mark.
fn reference_text(stdout: &str) -> &str {
    let s = stdout.strip_suffix("\n\n").expect("complete output");
    s.strip_suffix(" [end of text]\n").unwrap_or(s)
}

#[test]
fn greedy_output_under_schemas_equals_llama_cpp() {
    let text = std::fs::read_to_string(data_dir().join("outputs.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    let mut failures = Vec::new();
    for case in cases {
        let model = case["model"].as_str().unwrap();
        let model = test_support::workspace_root().join("models").join(
            model
                .strip_prefix("repo:")
                .expect("a model of the repository"),
        );
        let schema = data_dir().join(case["schema"].as_str().unwrap());
        let prompt = case["prompt"].as_str().unwrap();
        let n = case["n_predict"].as_u64().unwrap().to_string();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_llama-cli"))
            .args(["-m", model.to_str().unwrap(), "-p", prompt, "-n", &n])
            .args(["--temp", "0", "-t", "2", "-no-cnv", "--log-disable"])
            .arg("--json-schema-file")
            .arg(&schema)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            case["schema"],
            String::from_utf8_lossy(&out.stderr)
        );
        let ours = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
        let want = reference_text(case["stdout"].as_str().unwrap());
        if ours != want.as_bytes() {
            failures.push(format!(
                "{}: ours {:?}\n want {:?}",
                case["schema"],
                String::from_utf8_lossy(ours),
                want
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_bad_schema_on_the_command_line_exits_1_naming_the_keyword() {
    let model = test_support::workspace_root().join("models/stories260K.gguf");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_llama-cli"))
            .args(["-m", model.to_str().unwrap(), "-p", "Once", "-n", "4"])
            .args(["-no-cnv", "--log-disable"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["-j", r#"{"type": "array", "uniqueItems": true}"#]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uniqueItems"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let out = run(&["--json-schema", "{not json"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--json-schema") && err.contains("JSON"),
        "{err}"
    );

    let out = run(&["--json-schema-file", "no-such-schema.json"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-schema.json"), "{err}");
}
