//! JSON schema to grammar against llama.cpp's converter: every schema in
//! tests/data/json_schema gives exactly the grammar text llama.cpp wrote
//! for it (README there).

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
