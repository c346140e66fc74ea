//! Tiered compilation on a first start (`spin_runtime::engine::tier`): a component the compile
//! cache misses serves on Winch's code at once, Cranelift's code replaces it in the
//! background and lands in the cache, and the next start loads it from there.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The log line the tier-up thread writes when Cranelift's code is in place.
const SWAPPED: &str = "compiled with Cranelift in the background";

/// `log` without terminal colour sequences (`ESC [ ... m`), so `key=value` fields match.
fn no_ansi(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn cwasm_entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".cwasm"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn first_start_serves_on_baseline_then_swaps_in_cranelift_and_caches_it() {
    let app = prepare_app("spin-hello");
    let cache = tempfile::tempdir().unwrap();
    // Every size tiers here (the default starts at 2 MiB; spin-hello is ~0.2 MB).
    let env = [
        ("SPIN_SHIM_TIERED_COMPILE_MIN_BYTES", "0"),
        ("RUST_LOG", "info"),
    ];
    let server = Server::start_with_cache(app.path(), &env, cache.path());
    let r = server.get("/hello?x=1");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.field("component").as_deref(), Some("hello"));
    let log = log_with(&server, "app loaded");
    assert!(
        log.contains("compiled with the baseline compiler (Winch)"),
        "the first start did not use the baseline compiler:\n{log}"
    );
    assert!(no_ansi(&log).contains("baseline=1"), "{log}");

    // Requests keep being answered while the background compilation runs and after the swap.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut answered = 0;
    loop {
        let r = server.get("/users/7/posts/x");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.field("spin-path-match-id").as_deref(), Some("7"));
        answered += 1;
        if server.stderr.lock().unwrap().contains(SWAPPED) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no tier-up within 60 s after {answered} requests:\n{}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = server.get("/hello/a");
    assert_eq!(r.status, 200, "after the swap: {}", r.text());
    assert_eq!(r.field("component").as_deref(), Some("hello-wild"));
    assert_eq!(
        cwasm_entries(cache.path()).len(),
        1,
        "Cranelift's code was not stored in the cache"
    );
    drop(server);

    // The next start loads Cranelift's code from the cache: no baseline, nothing compiled.
    let server = Server::start_with_cache(app.path(), &env, cache.path());
    assert_eq!(server.get("/hello").status, 200);
    let log = no_ansi(&log_with(&server, "app loaded"));
    assert!(log.contains("cache_hits=1"), "{log}");
    assert!(log.contains("baseline=0"), "{log}");
    assert!(!log.contains("Winch"), "{log}");
}

#[test]
fn tiering_off_or_below_the_size_compiles_with_cranelift_before_serving() {
    let app = prepare_app("spin-hello");
    for env in [
        vec![
            ("SPIN_SHIM_TIERED_COMPILE", "0"),
            ("SPIN_SHIM_TIERED_COMPILE_MIN_BYTES", "0"),
        ],
        // spin-hello is far below the default threshold.
        vec![],
    ] {
        let cache = tempfile::tempdir().unwrap();
        let mut env = env.clone();
        env.push(("RUST_LOG", "info"));
        let server = Server::start_with_cache(app.path(), &env, cache.path());
        assert_eq!(server.get("/hello").status, 200);
        let log = no_ansi(&log_with(&server, "app loaded"));
        assert!(log.contains("baseline=0"), "{env:?}: {log}");
        assert!(log.contains("compiled=1"), "{env:?}: {log}");
        assert_eq!(cwasm_entries(cache.path()).len(), 1, "{env:?}");
    }
}

#[test]
fn a_read_only_cache_never_tiers() {
    let app = prepare_app("spin-hello");
    let cache = tempfile::tempdir().unwrap();
    let env = [
        ("SPIN_SHIM_TIERED_COMPILE_MIN_BYTES", "0"),
        ("SPIN_SHIM_COMPILE_CACHE_READONLY", "1"),
        ("RUST_LOG", "info"),
    ];
    let server = Server::start_with_cache(app.path(), &env, cache.path());
    assert_eq!(server.get("/hello").status, 200);
    let log = no_ansi(&log_with(&server, "app loaded"));
    assert!(log.contains("baseline=0"), "{log}");
    assert!(
        log.contains("compiled in memory (read-only compile cache)"),
        "{log}"
    );
    assert!(cwasm_entries(cache.path()).is_empty());
}

#[test]
fn a_bad_tiering_setting_fails_the_start_naming_it() {
    let app = prepare_app("spin-hello");
    let err = start_failure(app.path(), &[("SPIN_SHIM_TIERED_COMPILE", "fast")]);
    assert!(err.contains("SPIN_SHIM_TIERED_COMPILE"), "{err}");
    let err = start_failure(app.path(), &[("SPIN_SHIM_TIERED_COMPILE_MIN_BYTES", "2M")]);
    assert!(err.contains("SPIN_SHIM_TIERED_COMPILE_MIN_BYTES"), "{err}");
}
