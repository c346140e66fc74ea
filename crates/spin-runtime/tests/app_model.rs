//! The app model: manifest v2 parsing, errors naming file/key/reason, locked-app JSON
//! producing the same in-memory app.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use spin_runtime::app::{App, Content, ContentRef, FileMount, FileUrlResolver, Route};

fn write_app(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

const FULL: &str = r#"
spin_manifest_version = 2

[application]
name = "full"
version = "2.0.1"
description = "everything"
authors = ["a"]

[variables]
api_key = { required = true, secret = true }
region = { default = "eu" }

[[trigger.http]]
route = "/api/..."
component = "api"

[[trigger.http]]
id = "internal"
route = { private = true }
component = "api"

[component.api]
source = "api.wasm"
files = ["static/*.txt", { source = "data", destination = "/data" }]
exclude_files = ["static/skip.txt"]
environment = { MODE = "test" }
allowed_outbound_hosts = ["https://*.example.com", "redis://*:*"]
key_value_stores = ["default"]
sqlite_databases = ["default"]
ai_models = ["llama2-chat"]
[component.api.variables]
key = "{{ api_key }}"
endpoint = "https://{{region}}.example.com"
[component.api.build]
command = "cargo build"
"#;

fn full_app() -> tempfile::TempDir {
    write_app(&[
        ("spin.toml", FULL),
        ("api.wasm", "not really wasm"),
        ("static/a.txt", "A"),
        ("static/skip.txt", "S"),
        ("data/d.txt", "D"),
    ])
}

#[test]
fn manifest_v2_full_model() {
    let dir = full_app();
    let app = App::load_manifest(&dir.path().join("spin.toml")).unwrap();
    assert_eq!(app.name, "full");
    assert_eq!(app.version.as_deref(), Some("2.0.1"));
    assert!(app.variables["api_key"].is_required());
    assert!(app.variables["api_key"].secret);
    assert_eq!(app.variables["region"].default.as_deref(), Some("eu"));
    assert_eq!(app.http_triggers.len(), 2);
    assert_eq!(app.http_triggers[0].id, "api-http-trigger");
    assert_eq!(app.http_triggers[0].route, Route::Path("/api/...".into()));
    assert_eq!(app.http_triggers[1].id, "internal");
    assert_eq!(app.http_triggers[1].route, Route::Private);
    let c = &app.components["api"];
    assert_eq!(c.source, Content::Path(dir.path().join("api.wasm")));
    assert_eq!(c.environment["MODE"], "test");
    assert_eq!(
        c.allowed_outbound_hosts,
        ["https://*.example.com", "redis://*:*"]
    );
    assert_eq!(c.key_value_stores, ["default"]);
    assert_eq!(c.sqlite_databases, ["default"]);
    assert_eq!(c.ai_models, ["llama2-chat"]);
    assert_eq!(c.variables["endpoint"], "https://{{region}}.example.com");
    let dests: Vec<&str> = c.files.iter().map(FileMount::destination).collect();
    // A directory placement is expanded file by file, as Spin's loader locks it.
    assert_eq!(dests, ["/static/a.txt", "/data/d.txt"]);
    assert!(
        matches!(&c.files[1], FileMount::File { content: Content::Path(p), .. } if p == &dir.path().join("data/d.txt"))
    );
}

#[test]
fn old_allowed_http_hosts_is_converted() {
    let dir = write_app(&[
        (
            "spin.toml",
            r#"spin_manifest_version = 2
[application]
name = "old"
[[trigger.http]]
route = "/"
component = "c"
[component.c]
source = "c.wasm"
allowed_http_hosts = ["example.com", "insecure:allow-all", "https://x.org"]
"#,
        ),
        ("c.wasm", ""),
    ]);
    let app = App::load_manifest(&dir.path().join("spin.toml")).unwrap();
    assert_eq!(
        app.components["c"].allowed_outbound_hosts,
        // As Spin's compatibility code converts them: both schemes; allow-all wins.
        ["http://*:*", "https://*:*", "http://self"]
    );
}

#[test]
fn bare_allowed_http_host_allows_both_schemes() {
    let dir = write_app(&[
        (
            "spin.toml",
            "spin_manifest_version = 2\n[application]\nname = \"old\"\n[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\nallowed_outbound_hosts = [\"redis://r:6379\"]\nallowed_http_hosts = [\"example.com:8080\", \"https://x.org\"]\n",
        ),
        ("c.wasm", ""),
    ]);
    let app = App::load_manifest(&dir.path().join("spin.toml")).unwrap();
    assert_eq!(
        app.components["c"].allowed_outbound_hosts,
        [
            "redis://r:6379",
            "http://example.com:8080",
            "https://example.com:8080",
            "http://x.org",
            "https://x.org"
        ]
    );
}

/// Loads `manifest` (with a `c.wasm` beside it) and returns the error text.
fn error_of(manifest: &str) -> String {
    let dir = write_app(&[("spin.toml", manifest), ("c.wasm", "")]);
    let path = dir.path().join("spin.toml");
    let err = App::load_manifest(&path).expect_err("manifest must be rejected");
    let text = format!("{err:#}");
    assert!(
        text.contains(&path.display().to_string()) || text.contains("spin.toml"),
        "error must name the file: {text}"
    );
    text
}

const HEAD: &str = "spin_manifest_version = 2\n[application]\nname = \"e\"\n";

#[test]
fn manifest_errors_name_file_key_and_reason() {
    let cases: &[(&str, &[&str])] = &[
        (
            "spin_manifest_version = \"1\"\nname = \"x\"\n",
            &["spin_manifest_version", "version 1 is not supported"],
        ),
        ("[application]\nname = \"x\"\n", &["spin_manifest_version", "missing"]),
        (
            "[[trigger.kinesis]]\nstream = \"x\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\n",
            &["trigger.kinesis", "`kinesis` is not supported"],
        ),
        (
            "[[trigger.sqs]]\nqueue_url = \"x\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\n",
            &["[[trigger.sqs]]", "Amazon SQS"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"missing\"\n",
            &["missing", "not defined"],
        ),
        (
            "[[trigger.http]]\nroute = \"/.well-known/spin/x\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\n",
            &["/.well-known/spin/x", "reserved"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"nope.wasm\"\n",
            &["component.c.source", "nope.wasm", "not found"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\nenvironmnet = { A = \"b\" }\n",
            &["environmnet", "unknown field"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[variables]\nx = { required = true, default = \"d\" }\n",
            &["variables.x", "`required = true` OR have a `default`"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[variables]\nBad = { default = \"d\" }\n",
            &["variables.Bad", "lowercase"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\n[component.c.variables]\nk = \"{{ nothere }}\"\n",
            &["component.c.variables.k", "nothere", "not declared"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = { url = \"https://x/c.wasm\", digest = \"sha256:00\" }\n",
            &["component.c.source", "not a sha256 digest"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\nexecutor = { type = \"wagi\", entrypoint = \"main2\" }\n[component.c]\nsource = \"c.wasm\"\n",
            &["wagi `entrypoint` = `main2`", "only `_start` is run"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\nfiles = [\"../outside/*\"]\n",
            &["component.c.files", "inside"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\nfiles = [{ source = \"/etc\", destination = \"/etc\" }]\n",
            &["component.c.files", "source `/etc`", "stays inside"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\nfiles = [{ source = \"../..\", destination = \"/up\" }]\n",
            &["component.c.files", "source `../..`", "stays inside"],
        ),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n[component.c]\nsource = \"c.wasm\"\nfiles = [{ source = \"c.wasm\", destination = \"/a/../../b\" }]\n",
            &["component.c.files", "destination `/a/../../b`", "`..`"],
        ),
        ("this is = not toml = at all", &["invalid TOML"]),
        (
            "[[trigger.http]]\nroute = \"/\"\ncomponent = \"c_1\"\n[component.c_1]\nsource = \"c.wasm\"\n",
            &["component.c_1", "separated with '-'"],
        ),
        ("[component.c]\nsource = \"c.wasm\"\n", &["missing field `trigger`"]),
    ];
    for (body, needles) in cases {
        let text = if body.starts_with("spin_manifest_version")
            || body.starts_with("[application]")
            || body.starts_with("this")
        {
            error_of(body)
        } else {
            error_of(&format!("{HEAD}{body}"))
        };
        for needle in *needles {
            assert!(
                text.contains(needle),
                "error for\n{body}\nlacks `{needle}`: {text}"
            );
        }
    }
}

/// The locked form of [`FULL`], as `spin up` / `spin registry push` would write it.
fn locked_json(dir: &Path, inline_file: bool) -> String {
    let file_entry = if inline_file {
        // "A" in standard base64 without padding.
        serde_json::json!({"inline": "QQ", "path": "static/a.txt"})
    } else {
        serde_json::json!({"source": format!("file://{}", dir.join("static/a.txt").display()), "path": "static/a.txt"})
    };
    serde_json::json!({
        "spin_lock_version": 0,
        "metadata": {"name": "full", "version": "2.0.1", "description": "everything",
                     "trigger": {"type": "http"}, "origin": "file:///x/spin.toml"},
        "variables": {"api_key": {"secret": true}, "region": {"default": "eu"}},
        "triggers": [
            {"id": "api-http-trigger", "trigger_type": "http",
             "trigger_config": {"route": "/api/...", "component": "api"}},
            {"id": "internal", "trigger_type": "http",
             "trigger_config": {"route": {"private": true}, "component": "api"}}
        ],
        "components": [{
            "id": "api",
            "metadata": {"allowed_outbound_hosts": ["https://*.example.com", "redis://*:*"],
                         "key_value_stores": ["default"], "databases": ["default"],
                         "ai_models": ["llama2-chat"]},
            "source": {"content_type": "application/wasm",
                       "source": format!("file://{}", dir.join("api.wasm").display()),
                       "digest": "sha256:abc"},
            "env": {"MODE": "test"},
            "files": [file_entry,
                      {"source": format!("file://{}", dir.join("data/d.txt").display()), "path": "/data/d.txt"}],
            "config": {"key": "{{ api_key }}", "endpoint": "https://{{region}}.example.com"}
        }]
    })
    .to_string()
}

#[test]
fn locked_app_and_manifest_produce_the_same_app() {
    let dir = full_app();
    let from_manifest = App::load_manifest(&dir.path().join("spin.toml")).unwrap();
    let from_lock =
        App::from_locked_json(locked_json(dir.path(), false).as_bytes(), &FileUrlResolver).unwrap();
    assert_eq!(from_lock, from_manifest);
}

#[test]
fn locked_app_inline_and_digest_content() {
    let dir = full_app();
    let json = locked_json(dir.path(), true);
    let app = App::from_locked_json(json.as_bytes(), &FileUrlResolver).unwrap();
    match &app.components["api"].files[0] {
        FileMount::File {
            content,
            destination,
        } => {
            assert_eq!(destination, "/static/a.txt");
            assert_eq!(&*content.read().unwrap(), b"A");
        }
        other => panic!("{other:?}"),
    }
    // Digest-only source (an OCI layer): goes to the resolver.
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    value["components"][0]["source"]
        .as_object_mut()
        .unwrap()
        .remove("source");
    let json = value.to_string();
    let err = App::from_locked_json(json.as_bytes(), &FileUrlResolver).unwrap_err();
    assert!(format!("{err:#}").contains("sha256:abc"), "{err:#}");
    let seen = std::sync::Mutex::new(Vec::new());
    let resolver = |r: &ContentRef| -> anyhow::Result<Content> {
        seen.lock().unwrap().push(r.clone());
        Ok(Content::Bytes(Arc::from(&b"wasm-bytes"[..])))
    };
    let app = App::from_locked_json(json.as_bytes(), &resolver).unwrap();
    assert_eq!(
        &*app.components["api"].source.read().unwrap(),
        b"wasm-bytes"
    );
    assert_eq!(
        seen.lock().unwrap()[0].digest.as_deref(),
        Some("sha256:abc")
    );
}

#[test]
fn locked_app_errors_name_the_problem() {
    let dir = full_app();
    let base: serde_json::Value = serde_json::from_str(&locked_json(dir.path(), true)).unwrap();
    type Edit = fn(&mut serde_json::Value);
    let cases: BTreeMap<&str, (Edit, &str)> = BTreeMap::from([
        (
            "trigger type",
            (
                (|v: &mut serde_json::Value| v["triggers"][0]["trigger_type"] = "kinesis".into())
                    as Edit,
                "`kinesis` is not supported",
            ),
        ),
        (
            "must_understand",
            (
                |v: &mut serde_json::Value| {
                    v["spin_lock_version"] = 1.into();
                    v["must_understand"] = serde_json::json!(["host_requirements"]);
                    v["host_requirements"] =
                        serde_json::json!({"local_service_chaining": "required"});
                },
                "local_service_chaining",
            ),
        ),
        (
            "bad inline",
            (
                |v: &mut serde_json::Value| {
                    v["components"][0]["files"][0]["inline"] = "*not base64*".into()
                },
                "base64",
            ),
        ),
        (
            "unknown component",
            (
                |v: &mut serde_json::Value| {
                    v["triggers"][0]["trigger_config"]["component"] = "nope".into()
                },
                "nope",
            ),
        ),
        (
            "bad route",
            (
                |v: &mut serde_json::Value| v["triggers"][0]["trigger_config"]["route"] = 5.into(),
                "route",
            ),
        ),
        (
            "missing name",
            (
                |v: &mut serde_json::Value| {
                    v["metadata"].as_object_mut().unwrap().remove("name");
                },
                "metadata.name",
            ),
        ),
        (
            "trigger dependencies other than Spin 4's HTTP middleware",
            (
                |v: &mut serde_json::Value| {
                    v["triggers"][0]["trigger_dependencies"] = serde_json::json!({"auth": [{"source": {"content_type": "application/wasm", "source": "file:///m.wasm"}, "export": null}]});
                },
                "http trigger dependencies `auth` are not supported",
            ),
        ),
        (
            "unknown executor",
            (
                |v: &mut serde_json::Value| {
                    v["triggers"][0]["trigger_config"]["executor"] =
                        serde_json::json!({"type": "wasip4"});
                },
                "executor type `wasip4` is not supported",
            ),
        ),
    ]);
    // Spin 3.x's opt-in to WASIp3 handlers is the default executor.
    let mut json = base.clone();
    json["triggers"][0]["trigger_config"]["executor"] =
        serde_json::json!({"type": "wasip3-unstable"});
    App::from_locked_json(json.to_string().as_bytes(), &FileUrlResolver).unwrap();
    for (name, (edit, needle)) in cases {
        let mut json = base.clone();
        edit(&mut json);
        let err =
            App::from_locked_json(json.to_string().as_bytes(), &FileUrlResolver).expect_err(name);
        assert!(format!("{err:#}").contains(needle), "{name}: {err:#}");
    }
    let err = App::from_locked_json(b"{", &FileUrlResolver).unwrap_err();
    assert!(format!("{err:#}").contains("invalid locked-app JSON"));
}
