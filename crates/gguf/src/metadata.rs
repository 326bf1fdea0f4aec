//! Ordered metadata key/values with typed getters.

use crate::error::{Error, Result};
use crate::index::NameIndex;
use crate::value::{Array, ArrayElement, StringArray, Value};

/// Key of the data alignment (`u32`, a power of two).
pub const KEY_ALIGNMENT: &str = "general.alignment";

/// Alignment of the data section and of every tensor when the file does not
/// set `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The ordered key/value pairs of a GGUF file.
///
/// Order is kept (it is part of the file), keys are unique, and lookup is
/// logarithmic. Getters return [`Error::KeyNotFound`] for a missing key, so
/// optional keys read as `match md.get_u32(k) { Err(Error::KeyNotFound(_)) => default, r => r? }`
/// or simply through [`Metadata::get`].
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(Box<str>, Value)>,
    index: NameIndex,
}

impl PartialEq for Metadata {
    fn eq(&self, other: &Metadata) -> bool {
        self.entries == other.entries
    }
}

macro_rules! strict_getter {
    ($(#[$doc:meta] $fn:ident -> $t:ty, $v:ident;)*) => {$(
        #[$doc]
        pub fn $fn(&self, key: &str) -> Result<$t> {
            match self.require(key)? {
                Value::$v(x) => Ok(*x),
                other => Err(mismatch(key, stringify!($t), other)),
            }
        }
    )*};
}

fn mismatch(key: &str, expected: &str, found: &Value) -> Error {
    Error::TypeMismatch {
        key: key.to_string(),
        expected: expected.to_string(),
        found: found.type_description(),
    }
}

impl Metadata {
    /// An empty set.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Builds from entries and their index (built over the same entries).
    pub(crate) fn from_parts(entries: Vec<(Box<str>, Value)>, index: NameIndex) -> Metadata {
        Metadata { entries, index }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The pairs in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> + '_ {
        self.entries.iter().map(|(k, v)| (&**k, v))
    }

    /// The keys in file order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.entries.iter().map(|(k, _)| &**k)
    }

    /// Position of `key` in file order.
    pub fn position(&self, key: &str) -> Option<usize> {
        self.index.find(key, |i| &*self.entries[i].0)
    }

    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    /// The value of `key`, or [`Error::KeyNotFound`].
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| Error::KeyNotFound(key.to_string()))
    }

    /// Sets `key` to `value`: an existing key keeps its position, a new key
    /// goes last. Returns the previous value.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let key = key.into().into_boxed_str();
        let value = value.into();
        if let Some(i) = self.position(&key) {
            return Some(std::mem::replace(&mut self.entries[i].1, value));
        }
        let idx = self.entries.len();
        self.entries.push((key, value));
        let entries = &self.entries;
        self.index.insert(idx, &entries[idx].0, |i| &*entries[i].0);
        None
    }

    /// Removes `key`, returning its value. Later keys keep their order.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.position(key)?;
        self.index.remove(i);
        Some(self.entries.remove(i).1)
    }

    /// Keeps only the pairs for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &Value) -> bool) {
        self.entries.retain(|(k, v)| keep(k, v));
        let entries = &self.entries;
        // Keys were unique before, so they still are.
        self.index = NameIndex::build(entries.len(), |i| &*entries[i].0).unwrap_or_default();
    }

    strict_getter! {
        /// A `u8` value.
        get_u8 -> u8, U8;
        /// An `i8` value.
        get_i8 -> i8, I8;
        /// A `u16` value.
        get_u16 -> u16, U16;
        /// An `i16` value.
        get_i16 -> i16, I16;
        /// A `u32` value.
        get_u32 -> u32, U32;
        /// An `i32` value.
        get_i32 -> i32, I32;
        /// A `u64` value.
        get_u64 -> u64, U64;
        /// An `i64` value.
        get_i64 -> i64, I64;
        /// An `f32` value.
        get_f32 -> f32, F32;
        /// An `f64` value.
        get_f64 -> f64, F64;
        /// A boolean value.
        get_bool -> bool, Bool;
    }

    /// Any non-negative integer value as `u64` (a count stored as `i32` or
    /// `u32` reads the same, as llama.cpp's loader accepts both).
    pub fn get_uint(&self, key: &str) -> Result<u64> {
        self.get_integer(key, "u64")
    }

    /// Any integer value that fits `i64`.
    pub fn get_int(&self, key: &str) -> Result<i64> {
        self.get_integer(key, "i64")
    }

    /// Any integer value that fits `T` (named `target` in the error).
    fn get_integer<T: TryFrom<i128>>(&self, key: &str, target: &'static str) -> Result<T> {
        let v = self.require(key)?;
        let n = v
            .as_integer()
            .ok_or_else(|| mismatch(key, "an integer", v))?;
        T::try_from(n).map_err(|_| Error::OutOfRange {
            key: key.to_string(),
            value: n.to_string(),
            target,
        })
    }

    /// A string value as raw bytes.
    pub fn get_bytes(&self, key: &str) -> Result<&[u8]> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            other => Err(mismatch(key, "str", other)),
        }
    }

    /// A string value as UTF-8.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        std::str::from_utf8(self.get_bytes(key)?).map_err(|_| Error::InvalidUtf8 {
            key: key.to_string(),
            index: None,
        })
    }

    /// An array value of any element type.
    pub fn get_array_value(&self, key: &str) -> Result<&Array> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            other => Err(mismatch(key, "array", other)),
        }
    }

    /// Number of elements of an array value.
    pub fn get_array_len(&self, key: &str) -> Result<usize> {
        Ok(self.get_array_value(key)?.len())
    }

    /// The elements of an array of `T`, borrowed.
    pub fn get_slice<T: ArrayElement>(&self, key: &str) -> Result<&[T]> {
        let a = self.get_array_value(key)?;
        T::slice(a).ok_or_else(|| Error::TypeMismatch {
            key: key.to_string(),
            expected: format!("array of {}", T::TYPE.name()),
            found: a.type_description(),
        })
    }

    /// The elements of an array of `T`, copied.
    pub fn get_array<T: ArrayElement>(&self, key: &str) -> Result<Vec<T>> {
        self.get_slice(key).map(<[T]>::to_vec)
    }

    /// An array of strings, as stored.
    pub fn get_string_array(&self, key: &str) -> Result<&StringArray> {
        let a = self.get_array_value(key)?;
        a.as_strings().ok_or_else(|| Error::TypeMismatch {
            key: key.to_string(),
            expected: "array of str".to_string(),
            found: a.type_description(),
        })
    }

    /// An array of strings as raw bytes.
    pub fn get_bytes_array(&self, key: &str) -> Result<Vec<&[u8]>> {
        Ok(self.get_string_array(key)?.iter().collect())
    }

    /// An array of strings as UTF-8; the error names the first bad element.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.get_string_array(key)?
            .iter()
            .enumerate()
            .map(|(i, s)| {
                std::str::from_utf8(s).map_err(|_| Error::InvalidUtf8 {
                    key: key.to_string(),
                    index: Some(i),
                })
            })
            .collect()
    }

    /// The data alignment this metadata asks for: `general.alignment`, or
    /// 32 when absent. Errors when the key is not a `u32` power of two.
    pub fn alignment(&self) -> Result<u64> {
        match self.get(KEY_ALIGNMENT) {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(Value::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
            Some(Value::U32(a)) => Err(Error::OutOfRange {
                key: KEY_ALIGNMENT.to_string(),
                value: a.to_string(),
                target: "a non-zero power of two",
            }),
            Some(other) => Err(mismatch(KEY_ALIGNMENT, "u32", other)),
        }
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Metadata {
    /// Collects pairs; a repeated key keeps its first position and last value.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Metadata {
        let mut md = Metadata::new();
        for (k, v) in iter {
            md.set(k, v);
        }
        md
    }
}

/// Generates getters on a type that holds a [`Metadata`], forwarding to it.
macro_rules! forward_metadata_getters {
    ($field:ident) => {
        /// The value of `key`.
        pub fn get(&self, key: &str) -> Option<&$crate::Value> {
            self.$field.get(key)
        }
        /// A `u8` value.
        pub fn get_u8(&self, key: &str) -> $crate::Result<u8> {
            self.$field.get_u8(key)
        }
        /// An `i8` value.
        pub fn get_i8(&self, key: &str) -> $crate::Result<i8> {
            self.$field.get_i8(key)
        }
        /// A `u16` value.
        pub fn get_u16(&self, key: &str) -> $crate::Result<u16> {
            self.$field.get_u16(key)
        }
        /// An `i16` value.
        pub fn get_i16(&self, key: &str) -> $crate::Result<i16> {
            self.$field.get_i16(key)
        }
        /// A `u32` value.
        pub fn get_u32(&self, key: &str) -> $crate::Result<u32> {
            self.$field.get_u32(key)
        }
        /// An `i32` value.
        pub fn get_i32(&self, key: &str) -> $crate::Result<i32> {
            self.$field.get_i32(key)
        }
        /// A `u64` value.
        pub fn get_u64(&self, key: &str) -> $crate::Result<u64> {
            self.$field.get_u64(key)
        }
        /// An `i64` value.
        pub fn get_i64(&self, key: &str) -> $crate::Result<i64> {
            self.$field.get_i64(key)
        }
        /// An `f32` value.
        pub fn get_f32(&self, key: &str) -> $crate::Result<f32> {
            self.$field.get_f32(key)
        }
        /// An `f64` value.
        pub fn get_f64(&self, key: &str) -> $crate::Result<f64> {
            self.$field.get_f64(key)
        }
        /// A boolean value.
        pub fn get_bool(&self, key: &str) -> $crate::Result<bool> {
            self.$field.get_bool(key)
        }
        /// Any non-negative integer value as `u64`.
        pub fn get_uint(&self, key: &str) -> $crate::Result<u64> {
            self.$field.get_uint(key)
        }
        /// Any integer value that fits `i64`.
        pub fn get_int(&self, key: &str) -> $crate::Result<i64> {
            self.$field.get_int(key)
        }
        /// A string value as UTF-8.
        pub fn get_str(&self, key: &str) -> $crate::Result<&str> {
            self.$field.get_str(key)
        }
        /// A string value as raw bytes.
        pub fn get_bytes(&self, key: &str) -> $crate::Result<&[u8]> {
            self.$field.get_bytes(key)
        }
        /// Number of elements of an array value.
        pub fn get_array_len(&self, key: &str) -> $crate::Result<usize> {
            self.$field.get_array_len(key)
        }
        /// The elements of an array of `T`, borrowed.
        pub fn get_slice<T: $crate::ArrayElement>(&self, key: &str) -> $crate::Result<&[T]> {
            self.$field.get_slice(key)
        }
        /// The elements of an array of `T`, copied.
        pub fn get_array<T: $crate::ArrayElement>(&self, key: &str) -> $crate::Result<Vec<T>> {
            self.$field.get_array(key)
        }
        /// An array of strings as UTF-8.
        pub fn get_str_array(&self, key: &str) -> $crate::Result<Vec<&str>> {
            self.$field.get_str_array(key)
        }
        /// An array of strings as raw bytes.
        pub fn get_bytes_array(&self, key: &str) -> $crate::Result<Vec<&[u8]>> {
            self.$field.get_bytes_array(key)
        }
        /// An array of strings, as stored.
        pub fn get_string_array(&self, key: &str) -> $crate::Result<&$crate::StringArray> {
            self.$field.get_string_array(key)
        }
    };
}

pub(crate) use forward_metadata_getters;

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metadata {
        let mut md = Metadata::new();
        md.set("a.u32", 7u32);
        md.set("a.i32", -1i32);
        md.set("a.i32p", 5i32);
        md.set("a.str", "hello");
        md.set("a.bad", Value::String(vec![0xff, 0xfe]));
        md.set("a.arr", vec![1u32, 2, 3]);
        md.set("a.strs", ["x", "y"].into_iter().collect::<StringArray>());
        md
    }

    #[test]
    fn getters() {
        let md = sample();
        assert_eq!(md.get_u32("a.u32").unwrap(), 7);
        assert_eq!(md.get_uint("a.u32").unwrap(), 7);
        assert_eq!(md.get_uint("a.i32p").unwrap(), 5);
        assert!(matches!(
            md.get_uint("a.i32"),
            Err(Error::OutOfRange { .. })
        ));
        assert_eq!(md.get_int("a.i32").unwrap(), -1);
        assert_eq!(md.get_str("a.str").unwrap(), "hello");
        assert!(matches!(
            md.get_str("a.bad"),
            Err(Error::InvalidUtf8 { .. })
        ));
        assert_eq!(md.get_bytes("a.bad").unwrap(), &[0xff, 0xfe]);
        assert_eq!(md.get_array::<u32>("a.arr").unwrap(), vec![1, 2, 3]);
        assert_eq!(md.get_array_len("a.arr").unwrap(), 3);
        assert_eq!(md.get_str_array("a.strs").unwrap(), vec!["x", "y"]);
        assert!(matches!(md.get_u32("nope"), Err(Error::KeyNotFound(k)) if k == "nope"));
        let e = md.get_u32("a.i32").unwrap_err().to_string();
        assert!(
            e.contains("a.i32") && e.contains("i32") && e.contains("u32"),
            "{e}"
        );
        let e = md.get_array::<f32>("a.arr").unwrap_err().to_string();
        assert!(
            e.contains("array of u32") && e.contains("array of f32"),
            "{e}"
        );
    }

    #[test]
    fn set_remove_keep_order() {
        let mut md = sample();
        assert_eq!(md.set("a.u32", 9u32), Some(Value::U32(7)));
        assert_eq!(md.keys().next(), Some("a.u32"));
        assert_eq!(md.remove("a.i32"), Some(Value::I32(-1)));
        assert_eq!(md.get_uint("a.i32p").unwrap(), 5);
        md.set("z", true);
        assert_eq!(md.keys().last(), Some("z"));
        md.retain(|k, _| k != "a.str");
        assert!(md.get("a.str").is_none());
        assert!(md.get_bool("z").unwrap());
        assert_eq!(md.len(), 6);
    }

    #[test]
    fn alignment_key() {
        let mut md = Metadata::new();
        assert_eq!(md.alignment().unwrap(), 32);
        md.set(KEY_ALIGNMENT, 64u32);
        assert_eq!(md.alignment().unwrap(), 64);
        md.set(KEY_ALIGNMENT, 48u32);
        assert!(md.alignment().is_err());
        md.set(KEY_ALIGNMENT, 64u64);
        assert!(md.alignment().is_err());
    }
}
