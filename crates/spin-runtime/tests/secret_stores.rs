//! Variables from secret stores (`[[variables_provider]]` types `vault` and
//! `azure_key_vault`) through spin-serve and the spin-variables guest.
//!
//! No Vault, OpenBao or Azure Key Vault server is installable here, so the stores are a
//! loopback HTTPS stand-in written from the services' published HTTP APIs (Vault's KV v2
//! read `GET /v1/<mount>/data/<path>` with `X-Vault-Token`; Microsoft Entra ID's client
//! credentials token endpoint `POST /<tenant>/oauth2/v2.0/token`; Key Vault's
//! `GET /secrets/<name>?api-version=7.4` with a bearer token), behind a private CA made by
//! the test that the runtime trusts through `SSL_CERT_FILE`.

mod common;

use std::collections::HashMap;

use common::*;
use test_support::secret_store::{Seen, Store};

/// Vault with token `root-token`, KV v2 at mount `secret`, one secret `myapp/api_token`.
fn vault_route(req: &Seen) -> (u16, String) {
    if req.headers.get("x-vault-token").map(String::as_str) != Some("root-token") {
        return (403, r#"{"errors":["permission denied"]}"#.into());
    }
    match (req.method.as_str(), req.target.as_str()) {
        ("GET", "/v1/secret/data/myapp/api_token") => (
            200,
            r#"{"data":{"data":{"value":"vault-tok"},"metadata":{"version":3}}}"#.into(),
        ),
        _ => (404, r#"{"errors":[]}"#.into()),
    }
}

/// Entra ID (tenant `t1`, client `c1` with secret `s1` or a federated token `fed-jwt`) and
/// a Key Vault holding `api_token`.
fn azure_route(req: &Seen) -> (u16, String) {
    match (req.method.as_str(), req.target.as_str()) {
        ("POST", "/t1/oauth2/v2.0/token") => {
            let form: HashMap<String, String> = req
                .body
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.replace("%2F", "/").replace("%3A", ":")))
                .collect();
            let field = |k: &str| form.get(k).map(String::as_str);
            let credential_ok = field("client_secret") == Some("s1")
                || (field("client_assertion") == Some("fed-jwt")
                    && field("client_assertion_type")
                        == Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer"));
            if field("client_id") == Some("c1")
                && field("grant_type") == Some("client_credentials")
                && field("scope") == Some("https://vault.azure.net/.default")
                && credential_ok
            {
                (
                    200,
                    r#"{"token_type":"Bearer","expires_in":3599,"access_token":"kv-token"}"#.into(),
                )
            } else {
                (401, r#"{"error":"invalid_client"}"#.into())
            }
        }
        ("GET", target) if target.starts_with("/secrets/") => {
            if req.headers.get("authorization").map(String::as_str) != Some("Bearer kv-token") {
                return (401, r#"{"error":{"code":"Unauthorized"}}"#.into());
            }
            match target {
                "/secrets/api_token?api-version=7.4" => {
                    (200, r#"{"value":"azure-tok","id":"x"}"#.into())
                }
                _ => (404, r#"{"error":{"code":"SecretNotFound"}}"#.into()),
            }
        }
        _ => (404, "{}".into()),
    }
}

/// The spin-variables app with `runtime-config.toml` holding `providers`.
fn app_with(providers: &str) -> (tempfile::TempDir, String) {
    let app = prepare_app("spin-variables");
    let rc = app.path().join("runtime-config.toml");
    std::fs::write(&rc, providers).unwrap();
    let rc = rc.display().to_string();
    (app, rc)
}

#[test]
fn vault_values_come_first_and_a_missing_secret_falls_through() {
    let store = Store::start(vault_route);
    let (app, rc) = app_with(&format!(
        "[[variables_provider]]\ntype = \"vault\"\nurl = \"{}\"\ntoken = \"root-token\"\n\
         mount = \"secret\"\nprefix = \"myapp\"\n",
        store.url()
    ));
    let ca = store.ca();
    let server = Server::start(
        app.path(),
        &[
            ("SPIN_RUNTIME_CONFIG_FILE", &rc),
            ("SSL_CERT_FILE", &ca),
            ("API_TOKEN", "env-tok"),
        ],
    );
    assert_eq!(server.get("/token").text(), "vault-tok");
    // Not in Vault (404): the next source, here the manifest default.
    assert_eq!(server.get("/greeting").text(), "hello");
    let seen = store.seen();
    let reads: Vec<&str> = seen.iter().map(|s| s.target.as_str()).collect();
    assert!(
        reads.contains(&"/v1/secret/data/myapp/api_token")
            && reads.contains(&"/v1/secret/data/myapp/greeting"),
        "{reads:?}"
    );
    assert_eq!(
        reads
            .iter()
            .filter(|t| **t == "/v1/secret/data/myapp/api_token")
            .count(),
        1,
        "each secret is read once per process: {reads:?}"
    );
    let log = log_with(&server, "api_token");
    assert!(!log.contains("vault-tok"), "secret value logged:\n{log}");
}

#[test]
fn vault_refusals_and_an_untrusted_server_fail_the_start_naming_the_cause() {
    let store = Store::start(vault_route);
    let (app, rc) = app_with(&format!(
        "[[variables_provider]]\ntype = \"vault\"\nurl = \"{}\"\ntoken = \"wrong\"\n\
         mount = \"secret\"\n",
        store.url()
    ));
    let ca = store.ca();
    let err = start_failure(
        app.path(),
        &[("SPIN_RUNTIME_CONFIG_FILE", &rc), ("SSL_CERT_FILE", &ca)],
    );
    assert!(
        err.contains("vault provider")
            && err.contains("HTTP 403")
            && err.contains("permission denied")
            && err.contains("`token`"),
        "{err}"
    );
    // Verification is on: the store's CA is not trusted without SSL_CERT_FILE.
    let (app, rc) = app_with(&format!(
        "[[variables_provider]]\ntype = \"vault\"\nurl = \"{}\"\ntoken = \"root-token\"\n\
         mount = \"secret\"\n",
        store.url()
    ));
    let err = start_failure(app.path(), &[("SPIN_RUNTIME_CONFIG_FILE", &rc)]);
    assert!(
        err.contains("vault provider") && err.to_ascii_lowercase().contains("certificate"),
        "{err}"
    );
    // A provider without its mount is refused before any request.
    let (app, rc) = app_with(&format!(
        "[[variables_provider]]\ntype = \"vault\"\nurl = \"{}\"\ntoken = \"root-token\"\n",
        store.url()
    ));
    let err = start_failure(app.path(), &[("SPIN_RUNTIME_CONFIG_FILE", &rc)]);
    assert!(
        err.contains("`variables_provider[0].mount` is missing"),
        "{err}"
    );
}

#[test]
fn azure_key_vault_with_a_client_secret_or_workload_identity() {
    let store = Store::start(azure_route);
    let ca = store.ca();
    // Credentials in the runtime config are Spin's named clouds only; a loopback authority
    // comes from AZURE_AUTHORITY_HOST, as Azure's SDKs read it.
    let (app, rc) = app_with(&format!(
        "[[variables_provider]]\ntype = \"azure_key_vault\"\nvault_url = \"{}\"\n",
        store.url()
    ));
    let url = store.url();
    let base = [
        ("SPIN_RUNTIME_CONFIG_FILE", rc.as_str()),
        ("SSL_CERT_FILE", ca.as_str()),
        ("AZURE_AUTHORITY_HOST", url.as_str()),
        ("AZURE_TENANT_ID", "t1"),
        ("AZURE_CLIENT_ID", "c1"),
    ];
    let mut env = base.to_vec();
    env.push(("AZURE_CLIENT_SECRET", "s1"));
    let server = Server::start(app.path(), &env);
    assert_eq!(server.get("/token").text(), "azure-tok");
    assert_eq!(server.get("/greeting").text(), "hello");
    drop(server);
    let tokens = store
        .seen()
        .iter()
        .filter(|s| s.target.ends_with("/oauth2/v2.0/token"))
        .count();
    assert_eq!(tokens, 1, "one token per process: {:?}", store.seen());

    // Workload identity: the projected service-account token is the client assertion.
    let token_file = app.path().join("azure-identity-token");
    std::fs::write(&token_file, "fed-jwt\n").unwrap();
    let token_file = token_file.display().to_string();
    let mut env = base.to_vec();
    env.push(("AZURE_FEDERATED_TOKEN_FILE", &token_file));
    let server = Server::start(app.path(), &env);
    assert_eq!(server.get("/token").text(), "azure-tok");
    drop(server);

    // A wrong secret: the token endpoint's refusal, named.
    let mut env = base.to_vec();
    env.push(("AZURE_CLIENT_SECRET", "nope"));
    let err = start_failure(app.path(), &env);
    assert!(
        err.contains("refused a token (HTTP 401)") && err.contains("invalid_client"),
        "{err}"
    );
    // No credential anywhere.
    let err = start_failure(app.path(), &base[..3]);
    assert!(err.contains("AZURE_TENANT_ID"), "{err}");
    // Some but not all of the three in the runtime config.
    let (app, rc) = app_with(&format!(
        "[[variables_provider]]\ntype = \"azure_key_vault\"\nvault_url = \"{}\"\n\
         client_id = \"c1\"\n",
        store.url()
    ));
    let err = start_failure(app.path(), &[("SPIN_RUNTIME_CONFIG_FILE", &rc)]);
    assert!(err.contains("some but not all"), "{err}");
}
