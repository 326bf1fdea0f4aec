//! JSON schemas to GBNF: any JSON value as a schema is either refused with
//! an error or converted, and every converted grammar parses.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::grammar::Grammar;

fuzz_target!(|data: &[u8]| {
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(gbnf) = llama::json_schema::json_schema_to_grammar(&schema) else {
        return;
    };
    if let Err(e) = Grammar::parse(&gbnf) {
        panic!("the grammar of a schema does not parse: {e}\n{gbnf}");
    }
});
