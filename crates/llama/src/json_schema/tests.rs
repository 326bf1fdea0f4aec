//! Unit tests of the converter.
