//! In-process loading: compile cache behaviour and load-time errors for components the
//! HTTP trigger cannot serve.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use spin_runtime::app::{App, Component, Content, HttpTrigger, Route};
use spin_runtime::engine::compile_cache::{CompileCache, Outcome};
use spin_runtime::{HostContext, LoadedApp, RuntimeConfig};

fn guest_wasm(name: &str) -> Vec<u8> {
    let dir = match std::env::var("GUEST_APPS_DIR") {
        Ok(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/apps/target/wasm32-wasip2/release"),
    };
    let path = dir.join(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `make apps` or set GUEST_APPS_DIR",
            path.display()
        )
    })
}

fn one_component_app(source: &[u8]) -> App {
    let component = Component {
        id: "c".into(),
        source: Content::Bytes(Arc::from(source)),
        files: vec![],
        environment: BTreeMap::new(),
        allowed_outbound_hosts: vec![],
        key_value_stores: vec![],
        sqlite_databases: vec![],
        ai_models: vec![],
        variables: BTreeMap::new(),
        middleware: vec![],
    };
    App {
        name: "t".into(),
        version: None,
        description: None,
        variables: BTreeMap::new(),
        http_triggers: vec![HttpTrigger {
            id: "t".into(),
            route: Route::Path("/...".into()),
            component: "c".into(),
            static_response: None,
            wagi: None,
        }],
        components: BTreeMap::from([("c".to_string(), component)]),
        event_triggers: Default::default(),
        oci_image_digest: None,
    }
}

fn config(cache: Option<&std::path::Path>, app_dir: &std::path::Path) -> RuntimeConfig {
    RuntimeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_instance_memory: None,
        limits: Default::default(),
        compile_cache: cache.map(CompileCache::new),
        host: HostContext {
            app_dir: app_dir.to_path_buf(),
            env: Default::default(),
        },
        drain_timeout: Duration::from_secs(1),
        staging_dir: None,
        metrics_addr: None,
        tiering: Default::default(),
        tls: None,
    }
}

fn load_error(source: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    match LoadedApp::load(one_component_app(source), &config(None, dir.path())) {
        Ok(_) => panic!("load must fail"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn compile_cache_miss_then_hit_then_recovers_from_corruption() {
    let engine = spin_runtime::runtime::engine().unwrap();
    let wasm = guest_wasm("spin_hello.wasm");
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::new(dir.path().join("cache"));
    let (_, first) = cache.load_or_compile(engine, &wasm, "hello").unwrap();
    assert_eq!(first, Outcome::Miss);
    let entry = cache.entry_path(engine, &wasm);
    assert!(entry.is_file());
    let (_, second) = cache.load_or_compile(engine, &wasm, "hello").unwrap();
    assert_eq!(second, Outcome::Hit);
    // A damaged entry is not trusted: recompiled and rewritten.
    std::fs::write(&entry, b"garbage").unwrap();
    let (_, third) = cache.load_or_compile(engine, &wasm, "hello").unwrap();
    assert_eq!(third, Outcome::Miss);
    assert_eq!(
        cache.load_or_compile(engine, &wasm, "hello").unwrap().1,
        Outcome::Hit
    );
    // Different bytes, different key.
    let other = guest_wasm("spin_cpu.wasm");
    assert_ne!(cache.entry_path(engine, &other), entry);
}

#[test]
fn compile_cache_concurrent_starts_are_safe() {
    let engine = spin_runtime::runtime::engine().unwrap();
    let wasm = Arc::new(guest_wasm("spin_cpu.wasm"));
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::new(dir.path());
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (cache, wasm) = (cache.clone(), wasm.clone());
            std::thread::spawn(move || cache.load_or_compile(engine, &wasm, "cpu").map(|r| r.1))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "one entry, no temp files left: {names:?}");
    assert_eq!(
        cache.load_or_compile(engine, &wasm, "cpu").unwrap().1,
        Outcome::Hit
    );
}

#[test]
fn loaded_app_reports_cache_use() {
    let app_dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let wasm = guest_wasm("spin_hello.wasm");
    let cfg = config(Some(cache.path()), app_dir.path());
    let first = LoadedApp::load(one_component_app(&wasm), &cfg).unwrap();
    assert_eq!((first.stats.compiled, first.stats.cache_hits), (1, 0));
    let second = LoadedApp::load(one_component_app(&wasm), &cfg).unwrap();
    assert_eq!((second.stats.compiled, second.stats.cache_hits), (0, 1));
}

#[test]
fn not_a_component_is_rejected() {
    let e = load_error(b"definitely not wasm");
    assert!(
        e.contains("component `c`") && e.contains("not a Wasm binary"),
        "{e}"
    );
    // The text format is never parsed from an app: a .wat source is refused the same way.
    let e = load_error(b"(component)");
    assert!(e.contains("not a Wasm binary"), "{e}");
    let e = load_error(b"\0asm\x0d\0\x01\0 truncated");
    assert!(
        e.contains("component `c`") && !e.contains("not a Wasm binary"),
        "{e}"
    );
}

/// A component from its text form, compiled by the test (apps must ship binaries).
fn binary(wat: &[u8]) -> Vec<u8> {
    wat::parse_bytes(wat).unwrap().into_owned()
}

#[test]
fn component_without_http_export_is_rejected() {
    let e = load_error(&binary(b"(component)"));
    assert!(
        e.contains("does not export wasi:http/incoming-handler@0.2.x"),
        "{e}"
    );
}

#[test]
fn inbound_http_without_handler_is_a_clear_error() {
    // Spin 1.x's interface is served (tests/spin1_modules.rs), its function must be there.
    let wat = br#"(component
        (instance $i)
        (export "fermyon:spin/inbound-http" (instance $i)))"#;
    let e = load_error(&binary(wat));
    assert!(
        e.contains("exports `fermyon:spin/inbound-http` without its `handle-request`"),
        "{e}"
    );
    assert!(e.contains("rebuild"), "{e}");
}

#[test]
fn unknown_import_is_named_at_load() {
    let wat = br#"(component
        (import "fermyon:spin/llm@2.0.0" (instance (export "infer" (func))))
        (instance $h)
        (export "wasi:http/incoming-handler@0.2.0" (instance $h)))"#;
    let e = load_error(&binary(wat));
    assert!(e.contains("fermyon:spin/llm@2.0.0"), "{e}");
    assert!(e.contains("cannot be linked"), "{e}");
}

#[test]
fn runtime_config_from_env() {
    let dir = std::path::Path::new("/app");
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let cfg = RuntimeConfig::from_env(dir, &env(&[])).unwrap();
    assert_eq!(cfg.listen.to_string(), "0.0.0.0:80");
    assert_eq!(cfg.max_instance_memory, None);
    assert_eq!(cfg.host.app_dir, dir);
    let cfg = RuntimeConfig::from_env(
        dir,
        &env(&[
            ("SPIN_HTTP_LISTEN_ADDR", "127.0.0.1:3000"),
            ("SPIN_MAX_INSTANCE_MEMORY", "1048576"),
            ("SPIN_SHIM_COMPILE_CACHE_DIR", "/tmp/some-cache"),
            ("FOO", "bar"),
        ]),
    )
    .unwrap();
    assert_eq!(cfg.listen.to_string(), "127.0.0.1:3000");
    assert_eq!(cfg.max_instance_memory, Some(1 << 20));
    assert_eq!(
        cfg.compile_cache.unwrap().dir(),
        std::path::Path::new("/tmp/some-cache")
    );
    assert_eq!(cfg.host.env.get("FOO").map(String::as_str), Some("bar"));
    let err = RuntimeConfig::from_env(dir, &env(&[("SPIN_HTTP_LISTEN_ADDR", ":80")])).unwrap_err();
    assert!(err.to_string().contains("SPIN_HTTP_LISTEN_ADDR"), "{err}");
}
