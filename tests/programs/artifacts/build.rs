//! Builds the test programs beside this crate as components into `OUT_DIR`; `src/lib.rs` names
//! where. Only tests depend on this crate, so `cargo build` of the scheduler never builds them.

use std::path::PathBuf;

use wasched_guest_build as guest;

/// Test programs built for wasm32-unknown-unknown, with the file name their build produces.
const PROGRAMS: &[(&str, &str)] = &[
    ("wasched-hostile-spin", "wasched_hostile_spin"),
    ("wasched-hostile-hog", "wasched_hostile_hog"),
    ("wasched-hostile-trap-some", "wasched_hostile_trap_some"),
    ("wasched-hostile-bad-score", "wasched_hostile_bad_score"),
    (POOL_PREFERENCE, "wasched_fixture_pool_preference"),
    ("wasched-example-gpu-packing", "wasched_example_gpu_packing"),
    (
        "wasched-fixture-v01-maintenance",
        "wasched_fixture_v01_maintenance",
    ),
];

/// Built twice (version one, then with the `green` feature) for the hot-swap test.
const POOL_PREFERENCE: &str = "wasched-fixture-pool-preference";

fn main() {
    let root = guest::workspace_root();
    guest::rerun_if_changed(
        &root,
        &[
            "sdk",
            "tests/programs",
            "examples/plugins/rust/gpu-packing",
            "wit",
            "Cargo.lock",
        ],
    );
    let target_dir = guest::target_dir(&root);
    let packages: Vec<&str> = PROGRAMS.iter().map(|(package, _)| *package).collect();
    guest::build(&root, &target_dir, &packages, &[]);

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    for (package, file) in PROGRAMS {
        guest::encode(
            &target_dir,
            package,
            file,
            &out_dir.join(format!("{file}.wasm")),
        );
    }
    // Version two overwrites version one's module, so it is built after the loop above encoded it.
    guest::build(&root, &target_dir, &[POOL_PREFERENCE], &["green"]);
    guest::encode(
        &target_dir,
        POOL_PREFERENCE,
        "wasched_fixture_pool_preference",
        &out_dir.join("wasched_fixture_pool_preference_green.wasm"),
    );

    // The noisy plugin needs WASI to print: it is built for wasm32-wasip2, which links a component
    // directly. Without that target it is missing, and the test crate's build script (which checks
    // the same) compiles its test out.
    if guest::wasip2_installed() {
        let built = guest::build_wasip2(
            &root,
            &target_dir,
            "wasched-hostile-flood",
            "wasched_hostile_flood",
        );
        std::fs::copy(&built, out_dir.join("wasched_hostile_flood.wasm")).unwrap();
    }
    println!(
        "cargo:rustc-env=WASCHED_TEST_PROGRAMS={}",
        out_dir.display()
    );
}
