//! The runtime config as the host features read it: one parse into typed sections, with
//! Spin's verdicts on keys no feature reads (`spin-factors`' `TomlKeyTracker`).

use std::path::Path;

use spin_runtime::host::RuntimeConfig;

fn parse(text: &str) -> anyhow::Result<RuntimeConfig> {
    RuntimeConfig::parse(text, Path::new("/app"), "/app/runtime-config.toml")
}

#[test]
fn every_section_lands_in_its_features_typed_field() {
    let rc = parse(
        r#"
        [key_value_store.cache]
        type = "redis"
        url = "redis://127.0.0.1:6379"

        [sqlite_database.local]
        type = "spin"
        path = "db/local.db"

        [llm_compute]
        type = "remote_http"
        url = "http://127.0.0.1:9"
        auth_token = "t"

        [[variables_provider]]
        type = "static"
        values = { a = "1" }

        [[config_provider]]
        type = "env"
        prefix = "X"

        [outbound_networking]
        block_networks = ["private"]

        [outbound_http]
        max_connections = 4
        "#,
    )
    .unwrap();
    assert!(rc.key_value.contains_key("cache"), "{rc:?}");
    assert!(rc.sqlite.contains_key("local"), "{rc:?}");
    assert!(
        matches!(
            rc.llm,
            spin_runtime::host::llm::LlmCompute::RemoteHttp { .. }
        ),
        "{rc:?}"
    );
    assert_eq!(rc.variables.len(), 2, "{rc:?}");
    assert_ne!(rc.network, Default::default(), "{rc:?}");
    assert!(rc.client_tls.is_empty());
    // Every key of this runtime is some feature's.
    for key in [
        "key_value_store",
        "sqlite_database",
        "llm_compute",
        "variables_provider",
        "config_provider",
        "client_tls",
        "outbound_networking",
        "outbound_http",
        "outbound_redis",
        "outbound_pg",
        "outbound_mysql",
        "outbound_mqtt",
    ] {
        assert!(RuntimeConfig::sections().contains(&key), "{key}");
    }
}

#[test]
fn an_unknown_top_level_section_is_an_error_as_in_spin() {
    let err = parse("[key_value_stor.default]\ntype = \"spin\"\n[mystery]\nx = 1\n")
        .unwrap_err()
        .to_string();
    // Spin: "unused runtime config key(s): baz".
    assert!(
        err.contains("/app/runtime-config.toml")
            && err.contains("unused runtime config key(s): key_value_stor, mystery")
            && err.contains("`key_value_store`"),
        "{err}"
    );
    let err = parse("top = 1\n").unwrap_err().to_string();
    assert!(err.contains("unused runtime config key(s): top"), "{err}");
}

#[test]
fn spins_own_runtime_keys_are_accepted() {
    // Spin's CLI reads these outside its factors; a file written for `spin up` still loads.
    let rc =
        parse("state_dir = \"/tmp/s\"\nlog_dir = \"\"\nmax_instance_memory = 1000000\n").unwrap();
    assert_eq!(rc, RuntimeConfig::default());
}

#[test]
fn unknown_keys_inside_sections_follow_spin() {
    // Spin's `[outbound_*]`, `[[client_tls]]`, `[sqlite_database.*]` and providers deny
    // unknown fields: so does this runtime, naming the key.
    for (text, key) in [
        ("[outbound_http]\nmax_conections = 3\n", "max_conections"),
        (
            "[outbound_networking]\nblock_network = []\n",
            "block_network",
        ),
        (
            "[sqlite_database.x]\ntype = \"spin\"\npaht = \"a.db\"\n",
            "sqlite_database.x.paht",
        ),
        (
            "[[variables_provider]]\ntype = \"env\"\nprefx = \"A\"\n",
            "variables_provider[0].prefx",
        ),
        (
            "[[client_tls]]\ncomponent_ids = [\"a\"]\nhosts = [\"h\"]\nca_root_file = \"x\"\n",
            "client_tls[0].ca_root_file",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(
            err.contains("/app/runtime-config.toml") && err.contains(key),
            "{text}: {err}"
        );
    }
    // Spin ignores unknown keys of key-value stores and `[llm_compute]` (its structs take
    // no `deny_unknown_fields`): they load here too (and are logged).
    let rc = parse(
        "[key_value_store.a]\ntype = \"spin\"\npathh = \"x\"\n\
         [llm_compute]\ntype = \"spin\"\nmodels = \"m\"\n",
    )
    .unwrap();
    assert!(rc.key_value.contains_key("a"));
}

#[test]
fn a_section_error_names_the_file_before_unused_keys() {
    let err = parse("[llm_compute]\ntype = \"local\"\n[nope]\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/app/runtime-config.toml") && err.contains("llm_compute.type"),
        "{err}"
    );
}
