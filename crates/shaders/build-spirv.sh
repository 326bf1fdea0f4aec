#!/usr/bin/env bash
# Regenerates the committed SPIR-V (spv/*.spv and src/table.rs) from glsl/.
# Usage: crates/shaders/build-spirv.sh [--check] [--glslc PATH]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo run --quiet -p shaders --bin build-spirv -- "$@"
