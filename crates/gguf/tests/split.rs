//! Split models: opening the fixture parts as one model, writing and merging
//! parts, and rejecting inconsistent sets.

mod common;

use gguf::{split_path, GgufFile, GgufModel, SplitOptions};

#[test]
fn split_fixture_opens_as_one_tensor_set() {
    let dir = fixtures_or_skip!();
    let first = dir.join("models/tiny-q8_0-split-00001-of-00003.gguf");
    let model = GgufModel::open(&first).expect("open split");
    assert_eq!(model.files().len(), 3);
    assert_eq!(model.n_tensors(), 39);
    assert_eq!(model.tensors().count(), 39);
    assert_eq!(model.metadata().get_str("general.name").unwrap(), "tiny");
    let whole = GgufFile::open(dir.join("models/tiny-q8_0.gguf")).expect("open whole");
    for t in whole.tensors() {
        let (fi, st) = model
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("missing {}", t.name));
        assert_eq!((st.ty, &st.dims, st.size), (t.ty, &t.dims, t.size));
        assert_eq!(
            model.tensor_data(fi, st).unwrap(),
            whole.tensor_data(t).unwrap()
        );
    }
    assert!(model.tensor("nope").is_none());
    // Any part opens the whole set.
    let via_second =
        GgufModel::open(dir.join("models/tiny-q8_0-split-00002-of-00003.gguf")).unwrap();
    assert_eq!(via_second.n_tensors(), 39);
    assert_eq!(
        via_second.metadata().get_str("general.name").unwrap(),
        "tiny"
    );
    // A single file is a model of one file.
    assert_eq!(
        GgufModel::open(dir.join("models/tiny-q8_0.gguf"))
            .unwrap()
            .files()
            .len(),
        1
    );
}

#[test]
fn writing_three_parts_matches_gguf_split_and_reopens() {
    let dir = fixtures_or_skip!();
    let whole = GgufModel::open(dir.join("models/tiny-q8_0.gguf")).expect("open");
    let tmp = common::temp_dir("split-write");
    let prefix = tmp.join("tiny-q8_0-split");
    let prefix = prefix.to_str().expect("utf-8 temp path");
    let opts = SplitOptions {
        max_tensors: Some(13),
        max_bytes: None,
    };
    let paths = whole.write_split(prefix, &opts).expect("write split");
    assert_eq!(paths.len(), 3);
    for (i, p) in paths.iter().enumerate() {
        assert_eq!(p.to_str().unwrap(), split_path(prefix, i as u32, 3));
        let name = p.file_name().unwrap();
        let reference = std::fs::read(dir.join("models").join(name)).expect("fixture part");
        assert!(
            std::fs::read(p).unwrap() == reference,
            "{} differs from gguf-split's",
            p.display()
        );
    }
    let reopened = GgufModel::open(&paths[0]).expect("reopen");
    assert_eq!(reopened.n_tensors(), 39);
    for (fi, t) in whole.tensors() {
        let (rf, rt) = reopened.tensor(&t.name).expect("tensor");
        assert_eq!((rt.ty, &rt.dims), (t.ty, &t.dims));
        assert_eq!(
            reopened.tensor_data(rf, rt).unwrap(),
            whole.tensor_data(fi, t).unwrap()
        );
    }

    // By size: every part within the limit unless it holds a single tensor.
    let limit = 600_000;
    let by_size = whole
        .write_split(
            &format!("{prefix}-size"),
            &SplitOptions {
                max_tensors: None,
                max_bytes: Some(limit),
            },
        )
        .unwrap();
    assert!(by_size.len() > 3);
    let m = GgufModel::open(&by_size[1]).expect("reopen by size");
    assert_eq!(m.n_tensors(), 39);
    for f in m.files() {
        let data: u64 = f.tensors().iter().map(|t| t.size.div_ceil(32) * 32).sum();
        assert!(data <= limit || f.tensors().len() == 1);
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn merging_the_fixture_parts_gives_the_original() {
    let dir = fixtures_or_skip!();
    let model = GgufModel::open(dir.join("models/tiny-q8_0-split-00001-of-00003.gguf")).unwrap();
    let merged = model.write_merged(Vec::new()).expect("merge");
    let original = std::fs::read(dir.join("models/tiny-q8_0.gguf")).unwrap();
    assert!(
        merged == original,
        "merged parts differ from tiny-q8_0.gguf"
    );
}

#[test]
fn inconsistent_parts_are_rejected() {
    let dir = fixtures_or_skip!();
    let tmp = common::temp_dir("split-bad");
    let src = |i: u32| dir.join(format!("models/tiny-q8_0-split-{:05}-of-00003.gguf", i + 1));
    let dst = |i: u32| tmp.join(format!("m-{:05}-of-00003.gguf", i + 1));

    // A missing part.
    std::fs::copy(src(0), dst(0)).unwrap();
    std::fs::copy(src(1), dst(1)).unwrap();
    let e = GgufModel::open(dst(0)).unwrap_err().to_string();
    assert!(e.contains("part 3 of 3"), "{e}");

    // A part with the wrong split.no (part 2 stored as part 3).
    std::fs::copy(src(1), dst(2)).unwrap();
    let e = GgufModel::open(dst(0)).unwrap_err().to_string();
    assert!(e.contains("split.no"), "{e}");

    // Parts whose tensors collide.
    let part = |no: u16| {
        let md = gguf::split_metadata(&gguf::Metadata::new(), no, 2, 2);
        let t = gguf::TensorInfo::new("x", gguf::GgmlType::F32, &[1]).unwrap();
        let mut w = gguf::GgufWriter::new(Vec::new(), &md, &[t]).unwrap();
        w.write_tensor("x", &[0; 4]).unwrap();
        GgufFile::from_bytes(&w.finish().unwrap()).unwrap()
    };
    let e = GgufModel::from_files(vec![part(0), part(1)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tensor 'x' appears in part 1 and in part 2"),
        "{e}"
    );
    let a = GgufFile::open(src(0)).unwrap();
    let e = GgufModel::from_files(vec![a, GgufFile::open(src(0)).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("split.count 3, expected 2"), "{e}");

    // A renamed first part cannot find its siblings.
    let renamed = tmp.join("renamed.gguf");
    std::fs::copy(src(0), &renamed).unwrap();
    let e = GgufModel::open(&renamed).unwrap_err().to_string();
    assert!(e.contains("not named"), "{e}");

    // split.tensors.count must match the parts.
    let f = GgufFile::open(src(0)).unwrap();
    let mut md = f.metadata().clone();
    md.set("split.tensors.count", 40i32);
    f.save_with_metadata(dst(0), &md).unwrap();
    std::fs::copy(src(2), dst(2)).unwrap();
    let e = GgufModel::open(dst(0)).unwrap_err().to_string();
    assert!(e.contains("split.tensors.count"), "{e}");
    std::fs::remove_dir_all(&tmp).ok();
}
