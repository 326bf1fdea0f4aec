//! shaders
