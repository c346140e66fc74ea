//! Component sources by URL (`source = { url, digest }`) through spin-serve: downloaded
//! from a loopback HTTPS origin whose private CA the process trusts through `SSL_CERT_FILE`,
//! into spin-serve's own cache (`SPIN_SERVE_SOURCE_CACHE_DIR`), once.

mod common;
mod https_origin;

use std::path::Path;

use common::{start_failure, Server};
use https_origin::Origin;

fn app(url: &str, digest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let manifest = format!(
        "spin_manifest_version = 2\n[application]\nname = \"remote\"\n[[trigger.http]]\n\
         route = \"/...\"\ncomponent = \"fetched\"\n[component.fetched]\n\
         source = {{ url = \"{url}\", digest = \"{digest}\" }}\n\
         environment = {{ COMPONENT = \"fetched\" }}\n"
    );
    std::fs::write(dir.path().join("spin.toml"), manifest).unwrap();
    dir
}

/// The origin serving spin_hello.wasm, spin-serve's download cache, and the environment
/// that trusts the origin's CA and points spin-serve at that cache.
fn setup() -> (Origin, tempfile::TempDir, [(&'static str, String); 2]) {
    let origin = Origin::start(std::fs::read(common::guest_wasm("spin_hello.wasm")).unwrap());
    let cache = tempfile::tempdir().unwrap();
    let vars = [
        ("SSL_CERT_FILE", origin.ca_file().display().to_string()),
        (
            "SPIN_SERVE_SOURCE_CACHE_DIR",
            cache.path().display().to_string(),
        ),
    ];
    (origin, cache, vars)
}

fn env<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The cache's file names (downloads by hex digest; a partial download would show as a
/// `.tmp-download-*` file).
fn cache_files(cache: &Path) -> Vec<String> {
    match std::fs::read_dir(cache) {
        Ok(d) => d
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn downloads_once_then_serves_from_the_cache() {
    let (origin, cache, vars) = setup();
    let env = env(&vars);
    // Through a redirect to https, which is followed.
    let dir = app(&origin.url("/to-https"), &origin.digest());
    {
        let server = Server::start(dir.path(), &env);
        let r = server.get("/x");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert!(String::from_utf8_lossy(&r.body).contains("component=fetched"));
    }
    assert_eq!(origin.requests("/app.wasm"), 1);
    let hex = origin.digest()["sha256:".len()..].to_string();
    assert_eq!(cache_files(cache.path()), std::slice::from_ref(&hex));
    // A second app naming the same digest: no request reaches the origin.
    let server = Server::start(dir.path(), &env);
    assert_eq!(server.get("/y").status, 200);
    assert_eq!(origin.requests("/app.wasm"), 1);
    assert_eq!(origin.requests("/to-https"), 1);
    assert_eq!(cache_files(cache.path()), [hex]);
}

/// A refused source: URL, digest, extra environment, what the error must say.
type Case<'a> = (String, String, Vec<(&'a str, &'a str)>, Vec<&'a str>);

#[test]
fn refuses_what_it_cannot_verify_and_leaves_nothing() {
    let (origin, cache, vars) = setup();
    let env = env(&vars);
    let digest = origin.digest();
    let wrong = format!("sha256:{}", "0".repeat(64));
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let cases: Vec<Case> = vec![
        (
            origin.url("/app.wasm"),
            wrong.clone(),
            vec![],
            vec![
                "component.fetched.source",
                &digest,
                "the manifest says",
                "fix `digest`",
            ],
        ),
        (
            origin.url("/to-http"),
            digest.clone(),
            vec![],
            vec!["redirects to http://", "only https:// redirects"],
        ),
        (
            format!("https://{closed}/app.wasm"),
            digest.clone(),
            vec![],
            vec!["cannot download", "HTTPS_PROXY", "SSL_CERT_FILE"],
        ),
        (
            origin.url("/app.wasm"),
            digest.clone(),
            vec![("SPIN_SHIM_MAX_DOWNLOAD_BYTES", "1000")],
            vec![
                "more than the limit of 1000 bytes",
                "SPIN_SHIM_MAX_DOWNLOAD_BYTES",
            ],
        ),
        (
            origin.url("/stream.wasm"),
            digest.clone(),
            vec![("SPIN_SHIM_MAX_DOWNLOAD_BYTES", "1000")],
            vec!["more than the limit of 1000 bytes"],
        ),
        (
            origin.url("/missing.wasm"),
            digest.clone(),
            vec![],
            vec!["404", "check the URL"],
        ),
        (
            origin.url("/app.wasm").replace("https:", "http:"),
            digest.clone(),
            vec![],
            vec!["not an https:// URL"],
        ),
    ];
    for (url, digest, extra, want) in cases {
        let dir = app(&url, &digest);
        let mut env = env.clone();
        env.extend(extra);
        let err = start_failure(dir.path(), &env);
        for w in want {
            assert!(err.contains(w), "{url}: missing {w:?} in:\n{err}");
        }
        assert!(err.contains("component.fetched"), "{err}");
        assert_eq!(cache_files(cache.path()), Vec::<String>::new(), "{url}");
    }
    // Without the private CA the origin is not trusted.
    let dir = app(&origin.url("/app.wasm"), &origin.digest());
    let err = start_failure(
        dir.path(),
        &[(
            "SPIN_SERVE_SOURCE_CACHE_DIR",
            cache.path().to_str().unwrap(),
        )],
    );
    assert!(
        err.contains("cannot download") && err.contains("SSL_CERT_FILE"),
        "{err}"
    );
    assert_eq!(cache_files(cache.path()), Vec::<String>::new());
}

#[test]
fn goes_through_https_proxy_unless_no_proxy_names_the_host() {
    let (origin, cache, vars) = setup();
    let proxy = https_origin::ConnectProxy::start();
    let proxy_url = format!("http://{}", proxy.addr);
    let dir = app(&origin.url("/app.wasm"), &origin.digest());
    let mut env = env(&vars);
    env.push(("HTTPS_PROXY", &proxy_url));
    {
        let server = Server::start(dir.path(), &env);
        assert_eq!(server.get("/x").status, 200);
    }
    assert_eq!(proxy.connects(), 1);
    assert_eq!(origin.requests("/app.wasm"), 1);
    // NO_PROXY names the origin: a fresh cache downloads directly.
    std::fs::remove_dir_all(cache.path()).unwrap();
    env.push(("NO_PROXY", "example.com,127.0.0.1"));
    let server = Server::start(dir.path(), &env);
    assert_eq!(server.get("/x").status, 200);
    assert_eq!(proxy.connects(), 1);
    assert_eq!(origin.requests("/app.wasm"), 2);
}
