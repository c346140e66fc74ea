//! The app format against Spin's own shapes: locks Spin writes are read (and written back
//! byte for byte), manifests are locked as Spin's loader locks them.

use std::path::Path;

use serde_json::json;
use spin_app_format::locked::sha256_digest;
use spin_app_format::{manifest, HttpRoute, LockedApp, TriggerConfig};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

#[test]
fn pushed_lock_reads_and_writes_back_identically() {
    let bytes = fixture("spin-registry-push.lock.json");
    let lock = LockedApp::from_json(&bytes).unwrap();
    let web = lock.component("web").unwrap();
    assert_eq!(web.files.len(), 2);
    assert_eq!(web.files[0].path, "static/hello.txt");
    assert_eq!(
        web.files[0].content.inline.as_deref(),
        Some(&b"hello\n"[..])
    );
    assert_eq!(web.files[1].content.inline, None);
    assert_eq!(
        web.files[1].content.digest.as_deref(),
        Some(sha256_digest(&fixture("big.txt")).as_str())
    );
    assert_eq!(
        web.source.content.inline.as_deref(),
        Some(&b"\0asm\x0d\0\x01\0"[..])
    );
    assert_eq!(lock.variables["token"].default, None);
    let TriggerConfig::Http(h) = TriggerConfig::of(&lock.triggers[1]).unwrap() else {
        panic!("http")
    };
    assert_eq!(h.static_response.unwrap().status(), 200);
    assert_eq!(h.route, HttpRoute::Path("/static-ok".into()));
    assert_eq!(lock.to_json(), bytes, "written back byte for byte");
}

#[test]
fn spin_up_lock_reads_and_writes_back_identically() {
    let bytes = fixture("spin-loader-valid-manifest.lock");
    let lock = LockedApp::from_json(&bytes).unwrap();
    assert_eq!(lock.metadata_str("name"), Some("chain-of-command"));
    let TriggerConfig::Http(h) = TriggerConfig::of(&lock.triggers[0]).unwrap() else {
        panic!("http")
    };
    assert_eq!(h.executor.unwrap().type_name(), "http");
    assert_eq!(
        lock.components[0].allowed_outbound_hosts().unwrap(),
        ["redis://*:*", "mysql://*:*", "postgres://*:*"]
    );
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(
        String::from_utf8(lock.to_json_pretty()).unwrap(),
        text.trim_end()
    );
}

fn write(dir: &Path, files: &[(&str, &[u8])]) {
    for (p, data) in files {
        let p = dir.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
}

const MANIFEST: &str = r#"
spin_manifest_version = 2
[application]
name = "shop"
version = "1.2.3"
authors = ["a <a@example.com>"]
[application.trigger.http]
base = "/"
[variables]
api_key = { required = true, secret = true }
region = { default = "eu", description = "where" }

[[trigger.http]]
route = "/api/..."
component = "api"

[[trigger.http]]
route = "/api/..."
component = "api"

[[trigger.http]]
route = "/inline"
component = { source = "api.wasm", allowed_http_hosts = ["example.com"] }

[[trigger.http]]
id = "named"
route = { private = true }
component = { source = "api.wasm" }

[[trigger.http]]
route = "/static"
static_response = { status_code = 201, body = "made" }

[component.api]
source = "api.wasm"
description = "the API"
files = ["static/*.txt", { source = "data", destination = "/data" }, "one.txt"]
exclude_files = ["static/skip.txt", "data/secret.txt"]
environment = { MODE = "test", A = "1" }
allowed_outbound_hosts = ["https://*.example.com"]
allowed_http_hosts = ["self"]
key_value_stores = ["default"]
sqlite_databases = ["default"]
variables = { key = "{{ api_key }}", endpoint = "https://{{region}}.example.com" }
[component.api.build]
command = "cargo build --target wasm32-wasip1 --release"
watch = ["src/**/*.rs"]
"#;

#[test]
fn manifest_locks_as_spin_up_locks_it() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    write(
        &base,
        &[
            ("spin.toml", MANIFEST.as_bytes()),
            ("api.wasm", b"\0asm"),
            ("static/a.txt", b"A"),
            ("static/skip.txt", b"S"),
            ("data/d.txt", b"D"),
            ("data/secret.txt", b"no"),
            ("one.txt", b"1"),
        ],
    );
    let app = manifest::load(&base).unwrap();
    let lock = serde_json::to_value(&app.locked).unwrap();
    let url = |p: &str| format!("file://{}/{p}", base.display());
    assert_eq!(lock["spin_lock_version"], 0);
    assert_eq!(
        lock["metadata"],
        json!({
            "authors": ["a <a@example.com>"], "name": "shop", "version": "1.2.3",
            "origin": url("spin.toml"),
            "trigger": {"type": "http", "base": "/"},
            "triggers": {"http": {"base": "/"}},
        })
    );
    assert_eq!(
        lock["variables"],
        json!({"api_key": {"secret": true}, "region": {"default": "eu", "description": "where"}})
    );
    let ids: Vec<&str> = lock["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    // Spin's normalize_trigger_ids: `<component>-http-trigger` once, then `http-trigger<N>`.
    assert_eq!(
        ids,
        [
            "api-http-trigger",
            "http-trigger1",
            "http-trigger2",
            "named",
            "http-trigger3"
        ]
    );
    assert_eq!(
        lock["triggers"][2]["trigger_config"],
        json!({"route": "/inline", "component": "http-trigger2-component"})
    );
    assert_eq!(
        lock["triggers"][3]["trigger_config"]["component"],
        "named-component"
    );
    assert_eq!(
        lock["triggers"][4]["trigger_config"],
        json!({"route": "/static", "static_response": {"status_code": 201, "body": "made"}})
    );
    let comps = lock["components"].as_array().unwrap();
    let ids: Vec<&str> = comps.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["api", "http-trigger2-component", "named-component"]);
    let api = &comps[0];
    assert_eq!(
        api["metadata"],
        json!({
            "description": "the API",
            "allowed_outbound_hosts": ["https://*.example.com", "http://self"],
            "key_value_stores": ["default"],
            "databases": ["default"],
            "build": {"command": "cargo build --target wasm32-wasip1 --release", "watch": ["src/**/*.rs"]},
        })
    );
    assert_eq!(
        api["source"],
        json!({"content_type": "application/wasm", "source": url("api.wasm")})
    );
    assert_eq!(api["env"], json!({"A": "1", "MODE": "test"}));
    assert_eq!(
        api["config"],
        json!({"endpoint": "https://{{region}}.example.com", "key": "{{ api_key }}"})
    );
    // Excludes apply; with excludes a directory mount is listed file by file.
    assert_eq!(
        api["files"],
        json!([
            {"source": url("static/a.txt"), "path": "/static/a.txt"},
            {"source": url("data/d.txt"), "path": "/data/d.txt"},
            {"source": url("one.txt"), "path": "/one.txt"},
        ])
    );
    let guest: Vec<&str> = app.files("api").iter().map(|f| f.path.as_str()).collect();
    assert_eq!(guest, ["static/a.txt", "data/d.txt", "one.txt"]);
    assert_eq!(
        comps[1]["metadata"]["allowed_outbound_hosts"],
        json!(["http://example.com", "https://example.com"])
    );
    // What we write, Spin's reader shape reads back unchanged.
    let back = LockedApp::from_json(&app.locked.to_json()).unwrap();
    assert_eq!(back, app.locked);
}

#[test]
fn directory_mount_without_excludes_is_one_entry() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    write(
        &base,
        &[
            (
                "spin.toml",
                b"spin_manifest_version = 2\n[application]\nname = \"x\"\n[[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\nfiles = [{ source = \"assets\", destination = \"/\" }]\n",
            ),
            ("c.wasm", b""),
            ("assets/a/b.txt", b"b"),
            ("assets/c.txt", b"c"),
        ],
    );
    let app = manifest::load(&base.join("spin.toml")).unwrap();
    let files = serde_json::to_value(&app.locked.components[0].files).unwrap();
    assert_eq!(
        files,
        json!([{"source": format!("file://{}/assets", base.display()), "path": "/"}])
    );
    let guest: Vec<&str> = app.files("c").iter().map(|f| f.path.as_str()).collect();
    assert_eq!(guest, ["a/b.txt", "c.txt"]);
}

#[test]
fn manifest_errors_name_file_key_and_reason() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    write(&base, &[("c.wasm", b"")]);
    let head = "spin_manifest_version = 2\n[application]\nname = \"e\"\n[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n";
    let cases: &[(&str, &[&str])] = &[
        (
            "[component.c]\nsource = \"c.wasm\"\nallowed_http_hosts = [\"ftp://x\"]\n",
            &["component.c.allowed_http_hosts", "ftp://x"],
        ),
        (
            "[component.c]\nsource = \"c.wasm\"\nfiles = [\"nothere.txt\"]\n",
            &["component.c.files", "nothere.txt", "does not exist"],
        ),
        (
            "[component.c]\nsource = \"c.wasm\"\n[component.c.dependencies]\n\"a:b/c\" = \"1.0\"\n",
            &["component.c.dependencies"],
        ),
        (
            "[component.d]\nsource = \"c.wasm\"\n",
            &["component `c`", "not defined"],
        ),
        (
            "[component.c]\nsource = \"c.wasm\"\nvariables = { Bad = \"x\" }\n",
            &["component.c.variables.Bad"],
        ),
    ];
    for (body, needles) in cases {
        let e = manifest::parse(&format!("{head}{body}"), &base, "app/spin.toml")
            .map(|_| ())
            .unwrap_err();
        let text = format!("{e:#}");
        assert!(text.contains("app/spin.toml"), "{text}");
        for n in *needles {
            assert!(text.contains(n), "{body}: `{n}` missing from: {text}");
        }
    }
}

/// Spin 4's trigger dependencies are locked as Spin's loader locks them (its
/// `tests/ui/middleware.toml` case): each trigger's `dependencies` move onto its component;
/// a component shared by triggers with different middleware is cloned per trigger as
/// `<component>-for-<trigger id>`; the component gets the host requirement `middleware`
/// and the app `must_understand: component_host_requirements` (so version 1). Also:
/// `executor = { type = "wasip3-unstable" }` is kept for the runtime to accept.
#[test]
fn spin4_trigger_dependencies_locked_as_spin_does_and_wasip3_executor_kept() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    write(&base, &[("one.wasm", b"1"), ("two.wasm", b"2")]);
    let text = r#"spin_manifest_version = 2
[application]
name = "mw"
[[trigger.http]]
route = "/has-middleware"
component = "four"
dependencies.middleware = [{ path = "one.wasm" }, { component = "mid", inherit_configuration = ["allowed_outbound_hosts"] }]
[[trigger.http]]
route = "/no-middleware"
component = "five"
[[trigger.http]]
route = "/six-a"
component = "six"
dependencies.middleware = [{ path = "one.wasm", inherit_configuration = true }]
[[trigger.http]]
route = "/six-b"
component = "six"
dependencies.middleware = [{ component = "mid" }]
[component.four]
source = "one.wasm"
[component.five]
source = "one.wasm"
[component.six]
source = "one.wasm"
[component.mid]
source = "two.wasm"
"#;
    let app = manifest::parse(text, &base, "app/spin.toml").unwrap();
    let lock: serde_json::Value = serde_json::from_slice(&app.locked.to_json()).unwrap();
    let url = |f: &str| format!("file://{}", base.join(f).display());
    let dep = |f: &str, inherit: Option<serde_json::Value>| {
        let mut d = json!({"source": {"content_type": "application/wasm", "source": url(f)}, "export": null});
        if let Some(i) = inherit {
            d["inherit"] = i;
        }
        d
    };
    assert_eq!(lock["spin_lock_version"], 1);
    assert_eq!(
        lock["must_understand"],
        json!(["component_host_requirements"])
    );
    let triggers: Vec<(String, String)> = lock["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert!(t.get("trigger_dependencies").is_none(), "{t}");
            (
                t["id"].as_str().unwrap().to_string(),
                t["trigger_config"]["component"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        triggers,
        pairs(&[
            ("four-http-trigger", "four"),
            ("five-http-trigger", "five"),
            ("six-http-trigger", "six-for-six-http-trigger"),
            ("http-trigger1", "six-for-http-trigger1"),
        ])
    );
    let components = lock["components"].as_array().unwrap();
    let ids: Vec<&str> = components
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "four",
            "five",
            "six",
            "mid",
            "six-for-six-http-trigger",
            "six-for-http-trigger1"
        ]
    );
    let by_id = |id: &str| components.iter().find(|c| c["id"] == id).unwrap();
    let with_mw = |id: &str, deps: serde_json::Value| {
        let c = by_id(id);
        assert_eq!(
            c["metadata"]["resolve-trigger-dependencies-using"], "http",
            "{id}"
        );
        assert_eq!(
            c["host_requirements"],
            json!({"middleware": "required"}),
            "{id}"
        );
        assert_eq!(
            c["trigger_dependencies"],
            json!({ "middleware": deps }),
            "{id}"
        );
        assert_eq!(c["source"]["source"], url("one.wasm"), "{id}");
    };
    with_mw(
        "four",
        json!([
            dep("one.wasm", None),
            dep(
                "two.wasm",
                Some(json!({"Some": ["allowed_outbound_hosts"]}))
            )
        ]),
    );
    with_mw(
        "six-for-six-http-trigger",
        json!([dep("one.wasm", Some(json!("All")))]),
    );
    with_mw("six-for-http-trigger1", json!([dep("two.wasm", None)]));
    for plain in ["five", "six", "mid"] {
        let c = by_id(plain);
        assert!(c.get("trigger_dependencies").is_none(), "{c}");
        assert!(c.get("host_requirements").is_none(), "{c}");
    }
    // And it reads back.
    LockedApp::from_json(&app.locked.to_json()).unwrap();

    let bad = [
        (
            "[{ url = \"https://x/m.wasm\", digest = \"sha256:00\" }]",
            "remote dependencies",
        ),
        (
            "[{ package = \"a:b\", version = \"1.0.0\" }]",
            "registry dependencies",
        ),
        ("[{ component = \"nope\" }]", "names component `nope`"),
        ("[{ path = \"missing.wasm\" }]", "`missing.wasm` not found"),
        ("[{ wrong = 1 }]", "a trigger dependency is"),
        ("{ component = \"mid\" }", "must be a list"),
    ];
    for (deps, want) in bad {
        let text = format!(
            "spin_manifest_version = 2\n[application]\nname = \"e\"\n[[trigger.http]]\nroute = \"/\"\ncomponent = \"mid\"\ndependencies.middleware = {deps}\n[component.mid]\nsource = \"two.wasm\"\n"
        );
        let e = manifest::parse(&text, &base, "app/spin.toml")
            .map(|_| ())
            .unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains(want) && e.contains("app/spin.toml"),
            "{deps}: {e}"
        );
    }

    let p3 = "spin_manifest_version = 2\n[application]\nname = \"e\"\n[[trigger.http]]\nroute = \"/\"\ncomponent = \"mid\"\nexecutor = { type = \"wasip3-unstable\" }\n[component.mid]\nsource = \"two.wasm\"\n";
    let app = manifest::parse(p3, &base, "app/spin.toml").unwrap();
    assert_eq!(
        app.locked.triggers[0].trigger_config["executor"],
        json!({"type": "wasip3-unstable"})
    );
}

#[test]
fn redis_trigger_and_its_app_settings_are_typed() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    write(&base, &[("c.wasm", b"")]);
    let text = "spin_manifest_version = 2\n[application]\nname = \"e\"\n[application.trigger.redis]\naddress = \"redis://localhost\"\n[[trigger.redis]]\nchannel = \"orders\"\ncomponent = \"c\"\n[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\n";
    let app = manifest::parse(text, &base, "spin.toml").unwrap();
    let lock = &app.locked;
    // Two trigger types: no single `trigger` entry, global settings under `triggers`.
    assert!(lock.metadata.get("trigger").is_none());
    assert_eq!(
        lock.metadata["triggers"]["redis"]["address"],
        "redis://localhost"
    );
    assert_eq!(lock.triggers[0].id, "c-redis-trigger");
    match TriggerConfig::of(&lock.triggers[0]).unwrap() {
        TriggerConfig::Redis(r) => {
            assert_eq!((r.component.as_str(), r.channel.as_str()), ("c", "orders"));
        }
        other => panic!("{other:?}"),
    }
    let meta: spin_app_format::RedisTriggerMetadata =
        lock.trigger_metadata("redis").unwrap().unwrap();
    assert_eq!(meta.address, "redis://localhost");
    assert!(lock
        .trigger_metadata::<spin_app_format::MqttTriggerMetadata>("mqtt")
        .unwrap()
        .is_none());
}

#[test]
fn lock_sources_reads_nothing_and_locks_as_the_container_sees_the_app() {
    let d = "sha256:".to_string() + &"ab".repeat(32);
    let text = format!(
        r#"spin_manifest_version = 2
[application]
name = "a"
[[trigger.http]]
route = "/a"
component = {{ source = "in/line.wasm" }}
[[trigger.http]]
route = "/b"
component = "c"
dependencies.middleware = [{{ path = "mw.wasm", inherit_configuration = true }}]
[[trigger.cron]]
cron_expression = "* * * * * *"
component = "r"
[component.c]
source = "../c.wasm"
files = ["static/*", {{ source = "missing", destination = "/m" }}]
[component.r]
source = {{ url = "https://h/r.wasm", digest = "{d}" }}
"#
    );
    // None of these files exists: nothing is read, listed or fetched.
    let lock = manifest::lock_sources(&text, "m").unwrap();
    let source = |id: &str| {
        let c = lock
            .component(id)
            .unwrap_or_else(|| panic!("no component {id}"));
        assert!(c.files.is_empty(), "{id}: {:?}", c.files);
        c.source.content.clone()
    };
    assert_eq!(
        source("c").file_path().unwrap(),
        std::path::Path::new("/../c.wasm")
    );
    assert_eq!(
        source("http-trigger1-component").file_path().unwrap(),
        std::path::Path::new("/in/line.wasm")
    );
    let r = source("r");
    assert_eq!(
        (r.source.as_deref(), r.digest.as_deref()),
        (Some("https://h/r.wasm"), Some(d.as_str()))
    );
    let mw = &lock.component("c").unwrap().trigger_dependencies["middleware"][0];
    assert_eq!(
        mw.source.content.file_path().unwrap(),
        std::path::Path::new("/mw.wasm")
    );
    let e = format!(
        "{:#}",
        manifest::lock_sources("spin_manifest_version = \"1\"", "/spin.toml").unwrap_err()
    );
    assert!(e.contains("/spin.toml") && e.contains("version 1"), "{e}");
    // A URL source's digest is checked before anything would be fetched.
    let bad = text.replace(&d, "sha256:00");
    let e = format!("{:#}", manifest::lock_sources(&bad, "m").unwrap_err());
    assert!(
        e.contains("component.r.source") && e.contains("sha256"),
        "{e}"
    );
}

#[test]
fn lock_sources_refuses_files_outside_the_app() {
    for bad in [
        r#"files = [{ source = "/etc", destination = "/etc" }]"#,
        r#"files = [{ source = "a/../../b", destination = "/b" }]"#,
        r#"files = ["/etc/*"]"#,
        r#"files = [{ source = "a", destination = "/x/../.." }]"#,
    ] {
        let text = format!(
            "spin_manifest_version = 2\n[application]\nname = \"a\"\n[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\n{bad}\n"
        );
        let e = format!("{:#}", manifest::lock_sources(&text, "m").unwrap_err());
        assert!(e.contains("component.c.files"), "{bad}: {e}");
    }
}
