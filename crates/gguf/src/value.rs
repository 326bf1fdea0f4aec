//! Metadata values: the 13 GGUF value types, scalar values and typed arrays.

use std::fmt;

/// A GGUF metadata value type, as stored in the file (`u32` id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// `u8`
    U8 = 0,
    /// `i8`
    I8 = 1,
    /// `u16`
    U16 = 2,
    /// `i16`
    I16 = 3,
    /// `u32`
    U32 = 4,
    /// `i32`
    I32 = 5,
    /// `f32`
    F32 = 6,
    /// Boolean, one byte (non-zero is true).
    Bool = 7,
    /// Length-prefixed byte string (UTF-8 by convention).
    String = 8,
    /// Typed array: element type, count, elements.
    Array = 9,
    /// `u64`
    U64 = 10,
    /// `i64`
    I64 = 11,
    /// `f64`
    F64 = 12,
}

/// Number of value types.
pub const VALUE_TYPE_COUNT: u32 = 13;

impl ValueType {
    /// The type for a stored id, or `None` when the id is unknown.
    pub fn from_u32(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The stored id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Short name (`"u32"`, `"str"`, `"array"`, ...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "str",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Encoded size of a fixed-size type, `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `u8`
    U8(u8),
    /// `i8`
    I8(i8),
    /// `u16`
    U16(u16),
    /// `i16`
    I16(i16),
    /// `u32`
    U32(u32),
    /// `i32`
    I32(i32),
    /// `f32`
    F32(f32),
    /// Boolean.
    Bool(bool),
    /// Raw string bytes; checked for UTF-8 only when handed out as `&str`.
    String(Vec<u8>),
    /// Typed array.
    Array(Array),
    /// `u64`
    U64(u64),
    /// `i64`
    I64(i64),
    /// `f64`
    F64(f64),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A description of the type for messages: `"u32"`, `"array of str"`.
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(a) => a.type_description(),
            v => v.value_type().name().to_string(),
        }
    }

    /// The value as a signed 128-bit integer, for integer types only.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The string bytes, for strings.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The string as UTF-8, for valid UTF-8 strings.
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The array, for arrays.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x)
            }
        }
    )*};
}

value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, u64 => U64, i64 => I64, f64 => F64, Array => Array);

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.as_bytes().to_vec())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s.into_bytes())
    }
}

/// A typed array. Numeric arrays keep their elements in native form, so a
/// `tokenizer.ggml.scores` array costs exactly its size in the file.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// Boolean elements.
    Bool(Vec<bool>),
    /// String elements.
    String(StringArray),
    /// Nested arrays, each with its own element type.
    Array(Vec<Array>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f64` elements.
    F64(Vec<f64>),
}

impl Array {
    /// The element type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A description of the type for messages: `"array of u32"`.
    pub fn type_description(&self) -> String {
        format!("array of {}", self.element_type().name())
    }

    /// The elements as a slice of `T`, when `T` is the element type.
    pub fn as_slice<T: ArrayElement>(&self) -> Option<&[T]> {
        T::slice(self)
    }

    /// The string elements, for arrays of strings.
    pub fn as_strings(&self) -> Option<&StringArray> {
        match self {
            Array::String(s) => Some(s),
            _ => None,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Element types of numeric (and boolean) arrays, for typed array access.
pub trait ArrayElement: Copy + sealed::Sealed {
    /// The matching GGUF element type.
    const TYPE: ValueType;
    /// The array's elements when they have this type.
    fn slice(a: &Array) -> Option<&[Self]>;
    /// Wraps elements into an array.
    fn into_array(v: Vec<Self>) -> Array;
}

macro_rules! array_element {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl ArrayElement for $t {
            const TYPE: ValueType = ValueType::$v;
            fn slice(a: &Array) -> Option<&[Self]> {
                match a {
                    Array::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn into_array(v: Vec<Self>) -> Array {
                Array::$v(v)
            }
        }
        impl From<Vec<$t>> for Array {
            fn from(v: Vec<$t>) -> Array {
                Array::$v(v)
            }
        }
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Value {
                Value::Array(Array::$v(v))
            }
        }
    )*};
}

array_element!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    f32 => F32, bool => Bool, u64 => U64, i64 => I64, f64 => F64);

impl From<StringArray> for Array {
    fn from(v: StringArray) -> Array {
        Array::String(v)
    }
}

impl From<StringArray> for Value {
    fn from(v: StringArray) -> Value {
        Value::Array(Array::String(v))
    }
}

/// An array of byte strings stored back to back in one buffer, so that a
/// 100k-token vocabulary costs two allocations instead of 100k. An empty
/// array allocates nothing and the handle is one pointer wide, which keeps
/// [`Value`] small.
#[derive(Clone, Default)]
pub struct StringArray {
    inner: Option<Box<Strings>>,
}

#[derive(Clone, Default)]
struct Strings {
    data: Vec<u8>,
    /// End offset of each string in `data`.
    ends: Vec<usize>,
}

impl StringArray {
    /// An empty array.
    pub fn new() -> StringArray {
        StringArray::default()
    }

    /// An empty array with room for `n` strings of `bytes` bytes in total.
    pub fn with_capacity(n: usize, bytes: usize) -> StringArray {
        if n == 0 && bytes == 0 {
            return StringArray::new();
        }
        let s = Strings {
            data: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(n),
        };
        StringArray {
            inner: Some(Box::new(s)),
        }
    }

    /// Builds from concatenated strings and their end offsets (ascending,
    /// the last equal to `data.len()`).
    pub(crate) fn from_raw(data: Vec<u8>, ends: Vec<usize>) -> StringArray {
        debug_assert!(ends.last().map_or(data.is_empty(), |&e| e == data.len()));
        if ends.is_empty() {
            return StringArray::new();
        }
        StringArray {
            inner: Some(Box::new(Strings { data, ends })),
        }
    }

    fn data(&self) -> &[u8] {
        self.inner.as_ref().map_or(&[], |s| &s.data)
    }

    fn ends(&self) -> &[usize] {
        self.inner.as_ref().map_or(&[], |s| &s.ends)
    }

    /// Appends a string.
    pub fn push(&mut self, s: impl AsRef<[u8]>) {
        let inner = self.inner.get_or_insert_with(Box::default);
        inner.data.extend_from_slice(s.as_ref());
        inner.ends.push(inner.data.len());
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends().len()
    }

    /// True when there are no strings.
    pub fn is_empty(&self) -> bool {
        self.ends().is_empty()
    }

    /// Total bytes of all strings.
    pub fn total_bytes(&self) -> usize {
        self.data().len()
    }

    /// The bytes of string `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let ends = self.ends();
        let end = *ends.get(i)?;
        let start = if i == 0 { 0 } else { ends[i - 1] };
        self.data().get(start..end)
    }

    /// String `i` as UTF-8: `None` when out of range, `Some(Err)` when not UTF-8.
    pub fn get_str(&self, i: usize) -> Option<Result<&str, std::str::Utf8Error>> {
        self.get(i).map(std::str::from_utf8)
    }

    /// Iterates over the strings' bytes.
    pub fn iter(&self) -> StringArrayIter<'_> {
        StringArrayIter {
            array: self,
            next: 0,
        }
    }
}

impl PartialEq for StringArray {
    fn eq(&self, other: &StringArray) -> bool {
        self.ends() == other.ends() && self.data() == other.data()
    }
}

impl Eq for StringArray {}

impl<S: AsRef<[u8]>> FromIterator<S> for StringArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> StringArray {
        let mut a = StringArray::new();
        for s in iter {
            a.push(s);
        }
        a
    }
}

impl fmt::Debug for StringArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// Iterator over the strings of a [`StringArray`].
#[derive(Clone)]
pub struct StringArrayIter<'a> {
    array: &'a StringArray,
    next: usize,
}

impl<'a> Iterator for StringArrayIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.array.get(self.next)?;
        self.next += 1;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.array.len().saturating_sub(self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for StringArrayIter<'_> {}

impl<'a> IntoIterator for &'a StringArray {
    type Item = &'a [u8];
    type IntoIter = StringArrayIter<'a>;

    fn into_iter(self) -> StringArrayIter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_array() {
        let a: StringArray = ["ab", "", "c"].into_iter().collect();
        assert_eq!(a.len(), 3);
        assert_eq!(a.get(0), Some(&b"ab"[..]));
        assert_eq!(a.get(1), Some(&b""[..]));
        assert_eq!(a.get(2), Some(&b"c"[..]));
        assert_eq!(a.get(3), None);
        assert_eq!(a.iter().count(), 3);
        assert_eq!(a.total_bytes(), 3);
        assert_eq!(StringArray::new(), StringArray::with_capacity(4, 4));
        assert_ne!(a, StringArray::new());
        assert!(std::mem::size_of::<Value>() <= 32);
    }

    #[test]
    fn value_types() {
        for id in 0..VALUE_TYPE_COUNT {
            let t = ValueType::from_u32(id).unwrap();
            assert_eq!(t.id(), id);
        }
        assert_eq!(ValueType::from_u32(VALUE_TYPE_COUNT), None);
        assert_eq!(Value::from(vec![1u32]).type_description(), "array of u32");
        assert_eq!(Value::I32(-3).as_integer(), Some(-3));
        assert_eq!(Value::F32(1.0).as_integer(), None);
    }
}
