//! GGUF: the model file format of ggml and llama.cpp.
//!
//! This crate stands alone: it reads, validates and writes GGUF files, knows
//! the ggml type table, and handles models split over several files. It
//! depends on nothing else of the workspace.
//!
//! - [`GgufFile`]: one parsed file, memory-mapped ([`GgufFile::open`]) or read
//!   through any `Read + Seek` ([`GgufFile::read_from`]); metadata getters,
//!   tensor table, zero-copy tensor bytes.
//! - [`GgufModel`]: a single file or all parts of a split model as one tensor set.
//! - [`GgufWriter`]: streams a file out tensor by tensor; [`GgufModel::write_split`]
//!   and [`GgufFile::save_with_metadata`] build on it.
//!
//! Reading never trusts the file: every count and length is checked against
//! the bytes that remain before anything is allocated, and every rule
//! llama.cpp's reader and loader enforce is enforced here, with errors that
//! name the field and its byte offset. Versions 1 to 3 are read, in either
//! byte order; version 3 (little- or big-endian) is written.
//!
//! ```
//! use gguf::{GgmlType, GgufFile, GgufWriter, Metadata, TensorInfo};
//!
//! let mut md = Metadata::new();
//! md.set("general.architecture", "llama");
//! md.set("llama.context_length", 512u32);
//! let tensors = [TensorInfo::new("output_norm.weight", GgmlType::F32, &[4])?];
//! let mut w = GgufWriter::new(Vec::new(), &md, &tensors)?;
//! w.write_tensor("output_norm.weight", &[0u8; 16])?;
//! let bytes = w.finish()?;
//!
//! let f = GgufFile::from_bytes(&bytes)?;
//! assert_eq!(f.get_uint("llama.context_length")?, 512);
//! let t = f.tensor("output_norm.weight").expect("present");
//! assert_eq!((t.ne(), t.size), ([4, 1, 1, 1], 16));
//! assert_eq!(f.tensor_data_in(&bytes, t)?, &[0u8; 16]);
//! # Ok::<(), gguf::Error>(())
//! ```

#![warn(missing_docs)]

mod error;
mod file;
mod format;
mod index;
mod input;
mod metadata;
mod reader;
mod split;
mod tensor;
pub mod types;
mod value;
mod writer;

pub use error::{Error, Result};
pub use file::GgufFile;
pub use format::{align_up, Endian, MAGIC, MAX_ARRAY_DEPTH, VERSION};
pub use metadata::{Metadata, DEFAULT_ALIGNMENT, KEY_ALIGNMENT};
pub use reader::{DataLayout, ReadOptions};
pub use split::{
    plan_split, split_metadata, split_path, split_prefix, GgufModel, SplitOptions, KEY_SPLIT_COUNT,
    KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, MAX_SPLITS,
};
pub use tensor::{TensorInfo, MAX_DIMS, MAX_NAME_LEN};
pub use types::{GgmlType, TypeTraits, GGML_TYPE_COUNT, QK_K};
pub use value::{
    Array, ArrayElement, StringArray, StringArrayIter, Value, ValueType, VALUE_TYPE_COUNT,
};
pub use writer::{GgufWriter, WriteOptions};
