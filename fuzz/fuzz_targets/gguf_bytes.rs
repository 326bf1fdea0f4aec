//! Whole GGUF files: the reader and validator over a byte slice and over a
//! stream must agree, and everything a parsed file offers can be read.

#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let from_slice = gguf::GgufFile::from_bytes(data);
    let from_stream = gguf::GgufFile::read_from(Cursor::new(data));
    assert_eq!(
        from_slice.is_ok(),
        from_stream.is_ok(),
        "slice and stream readers disagree: {:?} / {:?}",
        from_slice.as_ref().err(),
        from_stream.as_ref().err()
    );
    let Ok(f) = from_slice else { return };
    for (key, value) in f.metadata().iter() {
        let _ = (key.len(), format!("{value:?}").len());
    }
    let _ = f.metadata().alignment();
    for t in f.tensors() {
        let _ = f.tensor_data_in(data, t);
        assert!(
            f.tensor(&t.name).is_some(),
            "tensor '{}' not found by name",
            t.name
        );
    }
    // A file that parses and can be written again parses again, to the
    // same table.
    let written = (|| {
        let mut w = gguf::GgufWriter::with_options(
            Vec::new(),
            f.metadata(),
            f.tensors(),
            &f.write_options(),
        )?;
        for t in f.tensors() {
            w.write_tensor(&t.name, f.tensor_data_in(data, t)?)?;
        }
        w.finish()
    })();
    if let Ok(out) = written {
        let again = gguf::GgufFile::from_bytes(&out)
            .unwrap_or_else(|e| panic!("a written file does not parse: {e}"));
        assert_eq!(again.tensors().len(), f.tensors().len());
        assert_eq!(again.metadata().len(), f.metadata().len());
    }
});
