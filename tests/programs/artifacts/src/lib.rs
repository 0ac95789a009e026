//! Where the test programs were built: misbehaving plugins for the sandbox tests
//! (`wasched_hostile_*.wasm`), the hot-swap fixture in two versions
//! (`wasched_fixture_pool_preference{,_green}.wasm`), the GPU packing example
//! (`wasched_example_gpu_packing.wasm`) and a plugin built against WIT 0.1.0
//! (`wasched_fixture_v01_maintenance.wasm`).

use std::path::{Path, PathBuf};

/// The directory holding the built components.
pub const DIR: &str = env!("WASCHED_TEST_PROGRAMS");

/// The component `file` (for example `wasched_hostile_spin.wasm`).
pub fn component(file: &str) -> PathBuf {
    Path::new(DIR).join(file)
}
