//! Host features without a guest: `allowed_outbound_hosts` patterns, variable precedence
//! and templates, the runtime config, and the SQLite store (on real files in temp dirs).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use spin_runtime::app::Variable;
use spin_runtime::host::kv::{self, KvStores, SqliteStore, StoreDefinition};
use spin_runtime::host::outbound::{AllowedHost, AllowedHosts};
use spin_runtime::host::variables::{self, ValueSource};
use spin_runtime::host::RuntimeConfig;

fn allows(pattern: &str, uri: &str) -> bool {
    let hosts = AllowedHosts::parse("c", &[pattern.to_string()], |s| Ok(s.to_string()))
        .unwrap_or_else(|e| panic!("{pattern}: {e:#}"));
    hosts.allows_uri(&uri.parse().unwrap())
}

#[test]
fn outbound_scheme_host_and_default_port() {
    assert!(allows("https://example.com", "https://example.com/x"));
    assert!(allows("https://example.com", "https://example.com:443/x"));
    assert!(allows("https://EXAMPLE.com", "https://example.COM/"));
    assert!(!allows("https://example.com", "http://example.com/"));
    assert!(!allows("https://example.com", "https://example.com:8443/"));
    assert!(!allows("https://example.com", "https://api.example.com/"));
    assert!(!allows("https://example.com", "https://example.org/"));
    assert!(allows("http://example.com", "http://example.com/"));
    assert!(!allows("http://example.com", "http://example.com:8080/"));
}

#[test]
fn outbound_wildcards() {
    // Subdomain wildcard: any depth of subdomain, not the bare domain.
    assert!(allows("https://*.example.com", "https://api.example.com/"));
    assert!(allows("https://*.example.com", "https://a.b.example.com/"));
    assert!(!allows("https://*.example.com", "https://example.com/"));
    assert!(!allows("https://*.example.com", "https://badexample.com/"));
    // Any host, any scheme, any port.
    assert!(allows("https://*", "https://anything.test/"));
    assert!(!allows("https://*", "https://anything.test:444/"));
    assert!(allows("*://*:*", "http://10.1.2.3:9999/"));
    assert!(allows("*://example.com:*", "ftp://example.com:21/"));
    assert!(!allows("*://example.com:*", "ftp://other.com:21/"));
    assert!(allows("http://*:8080", "http://127.0.0.1:8080/"));
    assert!(!allows("http://*:8080", "http://127.0.0.1:8081/"));
}

#[test]
fn outbound_ports_ips_and_cidr() {
    assert!(allows(
        "http://127.0.0.1:3000..3005",
        "http://127.0.0.1:3004/"
    ));
    assert!(!allows(
        "http://127.0.0.1:3000..3005",
        "http://127.0.0.1:3005/"
    ));
    assert!(allows("http://10.0.0.0/8:*", "http://10.200.3.4:80/"));
    assert!(!allows("http://10.0.0.0/8:*", "http://11.0.0.1:80/"));
    assert!(!allows("http://10.0.0.0/8:*", "http://ten.example:80/"));
    assert!(allows("http://[::1]:8080", "http://[::1]:8080/"));
    assert!(!allows("http://[::1]:8080", "http://127.0.0.1:8080/"));
    // An IP literal matches only that address, not a name resolving to it.
    assert!(!allows("http://127.0.0.1:8080", "http://localhost:8080/"));
}

#[test]
fn outbound_self_is_relative_only() {
    assert!(allows("http://self", "/internal"));
    assert!(!allows("http://self", "http://self.example/"));
    assert!(!allows("http://example.com", "/internal"));
    assert!(allows("*://*:*", "/internal"));
}

#[test]
fn outbound_bad_patterns_are_errors_naming_the_entry() {
    for (bad, expect) in [
        ("example.com", "has no scheme"),
        ("*", "has no scheme"),
        ("ht tp://example.com", "scheme"),
        ("https://example.com/path", "path"),
        ("https://api.*.example.com", "wildcard"),
        ("tcp://example.com", "well-known port"),
        ("http://example.com:99999", "not a number"),
        ("http://example.com:90..80", "empty"),
        ("http://10.0.0.0/33:*", "prefix length"),
    ] {
        let err = AllowedHost::parse(bad).expect_err(bad);
        assert!(err.contains(bad.trim()), "{bad}: {err}");
        assert!(err.contains(expect), "{bad}: expected `{expect}` in: {err}");
    }
    let err = AllowedHosts::parse("web", &["insecure:allow-all".into()], |s| Ok(s.into()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("component `web`") && err.contains("*://*:*"),
        "{err}"
    );
}

#[test]
fn outbound_templates_expand_before_parsing() {
    let vars: HashMap<&str, &str> = [("host", "api.example.com"), ("port", "8443")].into();
    let render = |s: &str| variables::render_template(s, |n| vars.get(n).map(|v| v.to_string()));
    let hosts = AllowedHosts::parse("c", &["https://{{ host }}:{{port}}".into()], render).unwrap();
    assert!(hosts.allows_uri(&"https://api.example.com:8443/".parse().unwrap()));
    assert!(!hosts.allows_uri(&"https://api.example.com/".parse().unwrap()));
    let err = AllowedHosts::parse("c", &["https://{{ nope }}".into()], render)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nope") && err.contains("component `c`"),
        "{err}"
    );
}

#[test]
fn denied_message_names_component_setting_and_fix() {
    let msg =
        spin_runtime::host::denied_message("fetcher", &"http://localhost:9000/x".parse().unwrap());
    assert!(msg.contains("component `fetcher`"), "{msg}");
    assert!(msg.contains("allowed_outbound_hosts"), "{msg}");
    assert!(msg.contains("\"http://localhost:9000\""), "{msg}");
}

fn decls() -> BTreeMap<String, Variable> {
    BTreeMap::from([
        (
            "greeting".to_string(),
            Variable {
                default: Some("hello".into()),
                secret: false,
            },
        ),
        (
            "api_token".to_string(),
            Variable {
                default: None,
                secret: true,
            },
        ),
    ])
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn variable_precedence_container_env_over_spin_variable_over_default() {
    let d = decls();
    let r = variables::resolve_all(&d, &env(&[("API_TOKEN", "t")])).unwrap();
    assert_eq!(r["greeting"].value, "hello");
    assert_eq!(r["greeting"].source, ValueSource::Default);

    let r = variables::resolve_all(
        &d,
        &env(&[("API_TOKEN", "t"), ("SPIN_VARIABLE_GREETING", "from-spin")]),
    )
    .unwrap();
    assert_eq!(r["greeting"].value, "from-spin");
    assert_eq!(r["greeting"].source, ValueSource::SpinVariableEnv);

    let r = variables::resolve_all(
        &d,
        &env(&[
            ("API_TOKEN", "t"),
            ("SPIN_VARIABLE_GREETING", "from-spin"),
            ("GREETING", "from-container"),
        ]),
    )
    .unwrap();
    assert_eq!(r["greeting"].value, "from-container");
    assert_eq!(r["greeting"].source, ValueSource::ContainerEnv);
    // The lower-case name is not the container variable.
    let r = variables::resolve_all(&d, &env(&[("API_TOKEN", "t"), ("greeting", "x")])).unwrap();
    assert_eq!(r["greeting"].value, "hello");
}

#[test]
fn missing_required_variable_names_it_and_the_fix() {
    let err = variables::resolve_all(&decls(), &env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("`api_token`"), "{err}");
    assert!(
        err.contains("API_TOKEN") && err.contains("SPIN_VARIABLE_API_TOKEN"),
        "{err}"
    );
    let ok = variables::resolve_all(&decls(), &env(&[("SPIN_VARIABLE_API_TOKEN", "s")])).unwrap();
    assert_eq!(ok["api_token"].value, "s");
}

#[test]
fn secret_values_are_redacted_in_debug() {
    let r = variables::resolve_all(&decls(), &env(&[("API_TOKEN", "hunter2")])).unwrap();
    let shown = format!("{r:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(
        shown.contains("<secret>") && shown.contains("hello"),
        "{shown}"
    );
}

#[test]
fn templates_render_and_report_errors() {
    let lookup = |n: &str| match n {
        "a" => Some("1".to_string()),
        "b_c" => Some("two".to_string()),
        _ => None,
    };
    assert_eq!(
        variables::render_template("x{{a}}y{{ b_c }}z", lookup).unwrap(),
        "x1ytwoz"
    );
    assert_eq!(
        variables::render_template("plain", lookup).unwrap(),
        "plain"
    );
    assert_eq!(variables::render_template("", lookup).unwrap(), "");
    let err = variables::render_template("{{ missing }}", lookup).unwrap_err();
    assert!(err.contains("`missing`"), "{err}");
    assert!(variables::render_template("{{ a ", lookup)
        .unwrap_err()
        .contains("closing"));
    assert!(variables::render_template("a }}", lookup)
        .unwrap_err()
        .contains("opening"));
    assert!(variables::render_template("{{ Bad }}", lookup)
        .unwrap_err()
        .contains("lower-case"));
}

#[test]
fn component_values_mark_secrets_and_name_the_component() {
    let resolved = variables::resolve_all(&decls(), &env(&[("API_TOKEN", "s3")])).unwrap();
    let templates = BTreeMap::from([
        ("both".to_string(), "{{greeting}}-{{api_token}}".to_string()),
        ("plain".to_string(), "{{ greeting }}".to_string()),
    ]);
    let values = variables::component_values("web", &templates, &resolved).unwrap();
    assert_eq!(values["both"].value, "hello-s3");
    assert!(values["both"].secret);
    assert!(!values["plain"].secret);
    let bad = BTreeMap::from([("x".to_string(), "{{ undeclared }}".to_string())]);
    let err = format!(
        "{:#}",
        variables::component_values("web", &bad, &resolved).unwrap_err()
    );
    assert!(
        err.contains("component `web`") && err.contains("undeclared"),
        "{err}"
    );
}

#[test]
fn variable_keys_follow_spin_rules() {
    for good in ["a", "abc_def", "a1", "x_1_y"] {
        variables::check_key(good).unwrap();
    }
    for bad in ["", "1a", "_a", "a_", "A", "a-b", "a__b", "a.b"] {
        assert!(variables::check_key(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn runtime_config_parses_stores_relative_to_its_dir() {
    let text = r#"
        [key_value_store.default]
        type = "spin"
        path = "data/kv.db"

        [key_value_store.mem]
        type = "spin"

        [key_value_store.cache]
        type = "redis"
        url = "redis://127.0.0.1:6379"
    "#;
    let rc = RuntimeConfig::parse(text, Path::new("/app"), "rc.toml").unwrap();
    assert_eq!(
        rc.key_value["default"],
        StoreDefinition::Sqlite(Some("/app/data/kv.db".into()))
    );
    assert_eq!(rc.key_value["mem"], StoreDefinition::Sqlite(None));
    assert!(matches!(rc.key_value["cache"], StoreDefinition::Redis(_)));

    let err = RuntimeConfig::parse(
        "[key_value_store.x]\ntype = \"mongodb\"\n",
        Path::new("/"),
        "rc.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("rc.toml") && err.contains("key_value_store.x.type"),
        "{err}"
    );
    let err = RuntimeConfig::parse("[key_value_store.x]\npath = \"a\"\n", Path::new("/"), "rc")
        .unwrap_err()
        .to_string();
    assert!(err.contains("key_value_store.x.type"), "{err}");
}

#[test]
fn kv_stores_default_location_undefined_labels_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join(".spin");
    let used = BTreeSet::from(["default".to_string()]);
    let stores = KvStores::open_with(&used, &state, &Default::default(), |l, d| {
        kv::open_definition(l, d).map(std::sync::Arc::new)
    })
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(stores.get("default").unwrap().set("k", b"v"))
        .unwrap();
    assert!(state.join(kv::DEFAULT_STORE_FILE).is_file());

    let used = BTreeSet::from(["other".to_string()]);
    let err = KvStores::open_with(&used, &state, &Default::default(), |l, d| {
        kv::open_definition(l, d).map(std::sync::Arc::new)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`other`") && err.contains("[key_value_store.other]"),
        "{err}"
    );

    let err = kv::open_definition("cache", &StoreDefinition::Redis("not a url".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("Redis URL") && err.contains("cache"), "{err}");
}

#[test]
fn sqlite_store_operations_persist_and_stores_are_separate() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kv.db");
    {
        let a = SqliteStore::open("a", Some(&db)).unwrap();
        let b = SqliteStore::open("b", Some(&db)).unwrap();
        assert_eq!(a.get("k").unwrap(), None);
        assert!(!a.exists("k").unwrap());
        a.set("k", b"one").unwrap();
        a.set("k", b"two").unwrap();
        a.set("j", b"").unwrap();
        b.set("k", b"other").unwrap();
        assert_eq!(a.get("k").unwrap().as_deref(), Some(&b"two"[..]));
        assert_eq!(a.keys().unwrap(), vec!["j", "k"]);
        a.delete("j").unwrap();
        a.delete("never-there").unwrap();
        assert_eq!(a.keys().unwrap(), vec!["k"]);
        assert_eq!(b.get("k").unwrap().as_deref(), Some(&b"other"[..]));
        assert_eq!(a.increment("n", 5).unwrap(), 5);
        assert_eq!(a.increment("n", -7).unwrap(), -2);
        let err = a.increment("k", 1).unwrap_err().to_string();
        assert!(err.contains("`k`") && err.contains("64-bit"), "{err}");
        assert!(a.compare_and_swap("c", None, b"1").unwrap());
        assert!(!a.compare_and_swap("c", None, b"2").unwrap());
        assert!(a.compare_and_swap("c", Some(b"1"), b"2").unwrap());
    }
    let a = SqliteStore::open("a", Some(&db)).unwrap();
    assert_eq!(a.get("k").unwrap().as_deref(), Some(&b"two"[..]));
    assert_eq!(a.get("c").unwrap().as_deref(), Some(&b"2"[..]));
}
