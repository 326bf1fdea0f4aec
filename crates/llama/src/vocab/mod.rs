//! Tokenizers: SPM, BPE and WPM vocabularies read from GGUF metadata.
