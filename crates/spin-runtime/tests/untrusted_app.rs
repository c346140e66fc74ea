//! Apps that name host paths with their ids, or hand `spin-serve` special files: the start
//! fails naming the input and the rule, and nothing outside the app is read or written.

mod common;

use std::path::Path;

use common::*;
use serde_json::json;

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o644) },
        0,
        "mkfifo {p:?}"
    );
}

/// A locked app serving `wasm` as component `id`, with one inline file (so the runtime
/// stages files: it made its staging directory from the id).
fn lock(id: &str, wasm: &Path) -> String {
    json!({
        "spin_lock_version": 0,
        "metadata": {"name": "untrusted"},
        "triggers": [{"id": "t", "trigger_type": "http",
            "trigger_config": {"route": "/...", "component": id}}],
        "components": [{
            "id": id,
            "source": {"content_type": "application/wasm",
                "source": spin_app_format::locked::file_url(wasm)},
            "files": [{"inline": "aGk", "path": "/greeting.txt"}]
        }]
    })
    .to_string()
}

#[test]
fn a_component_id_naming_a_host_directory_is_refused_and_the_directory_untouched() {
    let t = tempfile::tempdir().unwrap();
    // spin-serve's staging directory was `$TMPDIR/spin-files-<pid>-<n>-<id>`: with id
    // `x/../victim` it was `$TMPDIR/victim`, served to the component and emptied at stop.
    let tmp = t.path().join("tmp");
    let victim = tmp.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("data.txt"), b"not the app's").unwrap();
    let locked = t.path().join("locked.json");
    std::fs::write(&locked, lock("x/../victim", &guest_wasm("spin_hello.wasm"))).unwrap();
    let tmp_s = tmp.to_string_lossy().into_owned();
    let e = start_failure(&locked, &[("TMPDIR", tmp_s.as_str())]);
    assert!(
        e.contains("`x/../victim`") && e.contains("kebab-case"),
        "{e}"
    );
    let mut left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["victim"], "spin-serve staged files in {tmp:?}");
    assert_eq!(
        std::fs::read(victim.join("data.txt")).unwrap(),
        b"not the app's"
    );
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
}

#[test]
fn fifos_are_refused_without_being_opened() {
    let t = tempfile::tempdir().unwrap();
    // As spin.toml of an app directory: opening it for reading would block forever.
    let app = t.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    mkfifo(&app.join("spin.toml"));
    let e = start_failure(&app, &[]);
    assert!(e.contains("spin.toml") && e.contains("a FIFO"), "{e}");
    // As a locked app.
    let fifo_lock = t.path().join("app.json");
    mkfifo(&fifo_lock);
    let e = start_failure(&fifo_lock, &[]);
    assert!(e.contains("locked app") && e.contains("a FIFO"), "{e}");
    // As a component source.
    let src = t.path().join("c.wasm");
    mkfifo(&src);
    let locked = t.path().join("locked.json");
    std::fs::write(&locked, lock("c", &src)).unwrap();
    let e = start_failure(&locked, &[]);
    assert!(e.contains("c.wasm") && e.contains("a FIFO"), "{e}");
}
