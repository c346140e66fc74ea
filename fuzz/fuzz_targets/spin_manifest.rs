//! `spin.toml` (manifest v1 and v2) parsing into the app model: never a panic. Relative
//! paths resolve against an empty directory, so file globs touch nothing real.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn base_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("spin-fuzz-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("creating the fuzz base directory");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(app) = spin_runtime::App::from_manifest_str(text, base_dir(), "fuzz/spin.toml") {
        for t in &app.http_triggers {
            assert!(
                app.components.contains_key(&t.component),
                "trigger {} names component {} that the app lacks",
                t.id,
                t.component
            );
        }
    }
});
