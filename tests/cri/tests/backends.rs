//! Production backends and operator limits reached from a Spin pod through CRI (root only):
//! containerd 1.7, the private cgroup v2 namespace, kubelet's systemd driver, host network,
//! every server on loopback. The runtime config reaches the pod as SpinKube's `runtimeConfig`
//! does (a secret volume mounted at `/runtime-config.toml`) and the private CA as its
//! `caCertSecret` does (a volume holding `ca.pem`, named by `SSL_CERT_FILE`).
//!
//! Backends, over TLS with certificates from a private CA the test makes: redis-server
//! `--tls-port` (a `rediss://` key-value store and outbound Redis), PostgreSQL with `ssl=on`
//! (`sslmode=verify-full`), MariaDB with TLS (`ssl-mode=REQUIRED`), mosquitto's TLS listener
//! (`mqtts://`), a key-value store on DynamoDB (moto's server, plain HTTP on loopback), a
//! SQLite database on libSQL over HTTPS (no libSQL server is installable here: the loopback
//! stand-in written from Hrana 3's spec, `test_support::libsql`, backed by real SQLite) and
//! variables from Vault (`[[variables_provider]] type = "vault"`; no Vault server is
//! installable here: a loopback HTTPS stand-in written from Vault's KV v2 API), then from
//! Azure Key Vault (`type = "azure_key_vault"`, a service principal's client secret from the
//! pod's `AZURE_*` env; no Entra ID or Key Vault server is installable here: a loopback HTTPS
//! stand-in written from Entra ID's client-credentials token endpoint and Key Vault's secret
//! read) and key-value stores on Azure Cosmos DB (`type = "azure_cosmos"`; no Cosmos DB server
//! or emulator is installable here: `test_support::cosmos`, a loopback stand-in written from
//! its REST API that checks the master-key token). They are reached by the
//! `spin-hostifaces`, `spin-kv` and `spin-variables` guests, and the TLS servers are refused
//! with `UnknownIssuer` by a pod that does not trust the CA. A Cosmos DB store with another
//! account key gives the guest Cosmos DB's 401, and a pod whose Azure client secret is wrong
//! fails its start with Entra ID's refusal, named in its log.
//!
//! Limits: `block_networks` denies 127.0.0.1 while 127.0.0.2 (loopback too) answers, and
//! `[outbound_http] max_concurrent_requests = 1` (Spin's N + 1 connections) holds concurrent
//! guest requests to two at the origin while the others wait and then succeed.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`), the
//! Debian servers `scripts/setup.sh` installs, and moto (`scripts/install-moto.sh`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::node::{ContainerdVersion, Images, Node};
use cri_tests::scenario::{self, http_get};
use test_support::curl::Curl;
use test_support::libsql::StandIn;
use test_support::secret_store::{Seen, Store};
use test_support::servers::{self, url_encode, ServerProcess};

const LAYOUT: Layout = Layout::Unified;
const HEALTH: &str = "/.well-known/spin/health";
const T: Duration = Duration::from_secs(60);

/// A spin-in-container image of `manifest` (sources from the guest apps dir), imported.
fn import_app(node: &Node, dir: &Path, image: &str, manifest: &str) -> Result<()> {
    let app = dir.join(image.rsplit('/').next().unwrap_or(image).replace(':', "-"));
    std::fs::create_dir_all(&app)?;
    let wasm = integration::guest_apps_dir();
    std::fs::write(
        app.join("spin.toml"),
        manifest.replace("{WASM_DIR}", &wasm.display().to_string()),
    )?;
    let tar = app.with_extension("tar");
    oci_image_builder::spin::container_image(image, &app, &[])?.write_archive(&tar)?;
    node.import(&tar)
}

/// The pod's volumes: the runtime config at `/runtime-config.toml` (SpinKube's mount) and,
/// when given, the CA directory at `/etc/spin-ca`.
fn volumes(runtime_config: &Path, ca_dir: Option<&Path>) -> Vec<(PathBuf, String)> {
    let mut v = vec![(
        runtime_config.to_path_buf(),
        "/runtime-config.toml".to_string(),
    )];
    if let Some(ca) = ca_dir {
        v.push((ca.to_path_buf(), "/etc/spin-ca".to_string()));
    }
    v
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `GET /ops/?op=<op>&addr=<addr>&<rest>` on the hostifaces guest: (status, body).
fn op(addr: SocketAddr, op: &str, server: &str, rest: &str) -> Result<(u16, String)> {
    http_get(
        addr,
        &format!("/ops/?op={op}&addr={}&{rest}", url_encode(server)),
        T,
    )
}

/// `curl -X <method>` with `body`: (status, body).
fn curl(method: &str, url: &str, body: &str) -> Result<(u16, String)> {
    let c = Curl::run(&[
        "-X",
        method,
        "--data-binary",
        body,
        "-w",
        "\n%{http_code}",
        url,
    ]);
    ensure!(c.ok, "curl {method} {url}: {}", c.err);
    let (text, code) = c.out.rsplit_once('\n').unwrap_or(("", &c.out));
    Ok((code.trim().parse()?, text.to_string()))
}

fn redis_tls_get(redis: &ServerProcess, ca: &Path, db: &str, key: &str) -> Result<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["--tls", "--cacert", &ca.display().to_string()])
        .args(["-h", "127.0.0.1", "-p", &redis.port.to_string()])
        .args(["-n", db, "GET", key])
        .output()
        .context("redis-cli (Debian package redis-tools)")?;
    ensure!(out.status.success(), "redis-cli: {out:?}");
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The TLS servers and moto, with the PKI that signed their certificates.
struct Backends {
    pki: tempfile::TempDir,
    /// Holds only `ca.pem`, as a `caCertSecret` volume would.
    ca_dir: tempfile::TempDir,
    redis: ServerProcess,
    pg: ServerProcess,
    db: ServerProcess,
    broker: ServerProcess,
    moto: test_support::moto::Moto,
    vault: Store,
    libsql: StandIn,
    /// Entra ID and Key Vault.
    azure: Store,
    cosmos: test_support::cosmos::StandIn,
}

/// Vault's KV v2 API as the stand-in serves it: token `cri-token`, mount `secret`, one
/// secret `pods/api_token`.
fn vault_route(req: &Seen) -> (u16, String) {
    let token = req.headers.get("x-vault-token").map(String::as_str);
    match (token, req.method.as_str(), req.target.as_str()) {
        (Some("cri-token"), "GET", "/v1/secret/data/pods/api_token") => (
            200,
            r#"{"data":{"data":{"value":"from-vault"},"metadata":{"version":1}}}"#.into(),
        ),
        (Some("cri-token"), _, _) => (404, r#"{"errors":[]}"#.into()),
        _ => (403, r#"{"errors":["permission denied"]}"#.into()),
    }
}

/// Entra ID's token endpoint (tenant `cri-tenant`, client `cri-client` with secret
/// `cri-secret`, as a service principal) and Key Vault's secret read (`azure_secret`).
fn azure_route(req: &Seen) -> (u16, String) {
    let form = |k: &str| {
        req.body
            .split('&')
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
    };
    match (req.method.as_str(), req.target.as_str()) {
        ("POST", "/cri-tenant/oauth2/v2.0/token") => {
            if (form("client_id"), form("client_secret"), form("grant_type"))
                == (
                    Some("cri-client"),
                    Some("cri-secret"),
                    Some("client_credentials"),
                )
            {
                (
                    200,
                    r#"{"token_type":"Bearer","access_token":"cri-kv"}"#.into(),
                )
            } else {
                (401, r#"{"error":"invalid_client"}"#.into())
            }
        }
        ("GET", _)
            if req.headers.get("authorization").map(String::as_str) != Some("Bearer cri-kv") =>
        {
            (401, r#"{"error":{"code":"Unauthorized"}}"#.into())
        }
        ("GET", "/secrets/azure_secret?api-version=7.4") => {
            (200, r#"{"value":"from-key-vault","id":"x"}"#.into())
        }
        _ => (404, r#"{"error":{"code":"SecretNotFound"}}"#.into()),
    }
}

impl Backends {
    fn start() -> Result<Backends> {
        let pki = tempfile::Builder::new().prefix("cri-backends-").tempdir()?;
        test_support::pki::make_pki(pki.path());
        let vault = Store::start(vault_route);
        let libsql = StandIn::start("cri-token", true);
        let azure = Store::start(azure_route);
        // One bundle, as a caCertSecret holds it: the servers' CA and the stand-ins'.
        let ca_dir = tempfile::Builder::new().prefix("cri-ca-").tempdir()?;
        let mut bundle = std::fs::read(pki.path().join("ca.pem"))?;
        bundle.extend(std::fs::read(vault.ca())?);
        bundle.extend(std::fs::read(libsql.ca())?);
        bundle.extend(std::fs::read(azure.ca())?);
        std::fs::write(ca_dir.path().join("ca.pem"), bundle)?;
        let moto = test_support::moto::Moto::start(&integration::workspace_root());
        moto.create_kv_table("kv");
        Ok(Backends {
            redis: servers::redis_tls(pki.path()),
            pg: servers::postgres_tls(pki.path()),
            db: servers::mariadb_tls(pki.path()),
            broker: servers::mosquitto_tls(pki.path()),
            moto,
            vault,
            libsql,
            azure,
            cosmos: test_support::cosmos::StandIn::start(),
            pki,
            ca_dir,
        })
    }

    fn manifest(&self) -> String {
        format!(
            "spin_manifest_version = 2\n[application]\nname = \"backends\"\n\
             [variables]\ngreeting = {{ default = \"hello\" }}\n\
             api_token = {{ required = true, secret = true }}\n\
             azure_secret = {{ required = true, secret = true }}\n\
             [[trigger.http]]\nroute = \"/ops/...\"\ncomponent = \"ops\"\n\
             [[trigger.http]]\nroute = \"/vars/...\"\ncomponent = \"vars\"\n\
             [component.vars]\nsource = \"{{WASM_DIR}}/spin_variables.wasm\"\n\
             [component.vars.variables]\ngreeting = \"{{{{ greeting }}}}\"\n\
             token = \"{{{{ api_token }}}}\"\n\
             azure = \"{{{{ azure_secret }}}}\"\n\
             [[trigger.http]]\nroute = \"/kv/...\"\ncomponent = \"kv\"\n\
             [component.ops]\nsource = \"{{WASM_DIR}}/spin_hostifaces.wasm\"\n\
             allowed_outbound_hosts = [\"rediss://127.0.0.1:{}\", \"postgres://127.0.0.1:{}\", \
             \"mysql://127.0.0.1:{}\", \"mqtts://127.0.0.1:{}\"]\n\
             sqlite_databases = [\"remote\"]\n\
             [component.kv]\nsource = \"{{WASM_DIR}}/spin_kv.wasm\"\n\
             key_value_stores = [\"default\", \"other\", \"cosmos\", \"cosmos_wrong\"]\n",
            self.redis.port, self.pg.port, self.db.port, self.broker.port
        )
    }

    /// `default` on the TLS Redis (database 3), `other` on moto's DynamoDB table `kv`,
    /// `cosmos` on the Cosmos DB stand-in (`cosmos_wrong` there with another account key);
    /// with `providers`, variables from the Vault stand-in first, then from Key Vault's.
    fn runtime_config(&self, providers: bool) -> String {
        let provider = if providers {
            format!(
                "[[variables_provider]]\ntype = \"vault\"\nurl = \"{}\"\n\
                 token = \"cri-token\"\nmount = \"secret\"\nprefix = \"pods\"\n\
                 [[variables_provider]]\ntype = \"azure_key_vault\"\nvault_url = \"{}\"\n",
                self.vault.url(),
                self.azure.url()
            )
        } else {
            String::new()
        };
        let cosmos = |label: &str, key: &str| {
            format!(
                "[key_value_store.{label}]\ntype = \"azure_cosmos\"\nkey = \"{key}\"\n\
                 account = \"standin\"\ndatabase = \"db\"\ncontainer = \"kv\"\n\
                 endpoint = \"http://{}\"\n",
                self.cosmos.addr
            )
        };
        provider
            + &format!(
                "[sqlite_database.remote]\ntype = \"libsql\"\nurl = \"{}\"\n\
                 token = \"cri-token\"\n\
                 [key_value_store.default]\ntype = \"redis\"\nurl = \"rediss://127.0.0.1:{}/3\"\n\
             [key_value_store.other]\ntype = \"aws_dynamo\"\ntable = \"kv\"\n\
             region = \"us-east-1\"\naccess_key = \"test\"\nsecret_key = \"test\"\n\
             consistent_read = true\n",
                self.libsql.url(),
                self.redis.port
            )
            + &cosmos("cosmos", test_support::cosmos::KEY)
            + &cosmos("cosmos_wrong", "d3Jvbmcga2V5")
    }

    fn rediss(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.redis.port)
    }
    fn pg(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=verify-full",
            self.pg.port
        )
    }
    fn mysql(&self) -> String {
        format!(
            "mysql://root@127.0.0.1:{}/spin_test?ssl-mode=REQUIRED",
            self.db.port
        )
    }
    fn mqtts(&self) -> String {
        format!("mqtts://127.0.0.1:{}?client_id=cri-tls", self.broker.port)
    }

    /// The pod trusts the CA: every backend answers. One line per backend.
    fn trusted_checks(&self, addr: SocketAddr) -> Result<String> {
        let mut done = Vec::new();
        let scripts = [
            ("redis", self.rediss(), "", r#"get=Some("hello")"#),
            ("pg4", self.pg(), "", "insert=2"),
            ("mysql", self.mysql(), "", r#"Str("good dog")]"#),
            ("mqtt", self.mqtts(), "topic=cri/tls&qos=1", "publish=()"),
        ];
        for (name, server, rest, want) in &scripts {
            let (status, body) = op(addr, name, server, rest)?;
            ensure!(
                status == 200 && body.lines().any(|l| l.ends_with(want)),
                "{name} over TLS from the pod: {status} {body}"
            );
            done.push(format!("{name} ok"));
        }
        let base = format!("http://{addr}/kv");
        let (status, body) = curl("PUT", &format!("{base}/greeting"), "over tls")?;
        ensure!(status == 200, "kv rediss PUT: {status} {body}");
        let (status, body) = http_get(addr, "/kv/greeting", T)?;
        ensure!(
            (status, body.as_str()) == (200, "over tls"),
            "kv rediss GET: {status} {body}"
        );
        let stored = redis_tls_get(
            &self.redis,
            &self.pki.path().join("ca.pem"),
            "3",
            "greeting",
        )?;
        ensure!(stored == "over tls", "the value in Redis db 3: {stored:?}");
        done.push("kv rediss ok".into());
        let (status, body) = curl("PUT", &format!("{base}/greeting?store=other"), "hi dynamo")?;
        ensure!(status == 200, "kv dynamo PUT: {status} {body}");
        let (status, body) = http_get(addr, "/kv/greeting?store=other", T)?;
        ensure!(
            (status, body.as_str()) == (200, "hi dynamo"),
            "kv dynamo GET: {status} {body}"
        );
        let (status, item) = self.moto.call(
            "GetItem",
            r#"{"TableName":"kv","Key":{"PK":{"S":"greeting"}}}"#,
        );
        // "hi dynamo", base64: Spin's item layout (`VAL` holds the bytes).
        ensure!(
            status == 200 && item.contains("aGkgZHluYW1v"),
            "the item in DynamoDB: {status} {item}"
        );
        done.push("kv aws_dynamo ok".into());
        let (status, body) = http_get(addr, "/vars/token", T)?;
        ensure!(
            (status, body.as_str()) == (200, "from-vault"),
            "the secret from Vault: {status} {body}"
        );
        let (status, body) = http_get(addr, "/vars/greeting", T)?;
        ensure!(
            (status, body.as_str()) == (200, "hello"),
            "not in Vault: the manifest default: {status} {body}"
        );
        let reads = self.vault.seen();
        ensure!(
            reads
                .iter()
                .any(|r| r.target == "/v1/secret/data/pods/api_token"),
            "the Vault stand-in was not read: {reads:?}"
        );
        done.push("variables from Vault (HTTPS) ok".into());
        let (status, body) = http_get(addr, "/vars/azure", T)?;
        ensure!(
            (status, body.as_str()) == (200, "from-key-vault"),
            "the secret from Key Vault: {status} {body}"
        );
        let seen: Vec<String> = self
            .azure
            .seen()
            .iter()
            .map(|r| format!("{} {}", r.method, r.target))
            .collect();
        for want in [
            "POST /cri-tenant/oauth2/v2.0/token",
            "GET /secrets/azure_secret?api-version=7.4",
        ] {
            ensure!(
                seen.iter().any(|s| s == want),
                "the Key Vault stand-in did not see `{want}`: {seen:?}"
            );
        }
        done.push("variables from Azure Key Vault (HTTPS, Entra ID token) ok".into());
        let (status, body) = curl("PUT", &format!("{base}/greeting?store=cosmos"), "hi cosmos")?;
        ensure!(status == 200, "kv cosmos PUT: {status} {body}");
        let (status, body) = http_get(addr, "/kv/greeting?store=cosmos", T)?;
        ensure!(
            (status, body.as_str()) == (200, "hi cosmos"),
            "kv cosmos GET: {status} {body}"
        );
        let doc = self.cosmos.docs.lock().unwrap().get("greeting").cloned();
        let want: Vec<u8> = b"hi cosmos".to_vec();
        ensure!(
            doc.as_ref().map(|(d, _)| d)
                == Some(&serde_json::json!({"id": "greeting", "value": want})),
            "the document in the Cosmos DB stand-in: {doc:?}"
        );
        let (status, body) = http_get(addr, "/kv/greeting?store=cosmos_wrong", T)?;
        ensure!(
            status == 500 && body.contains("401") && body.contains("`kv`"),
            "another account key must give the guest Cosmos DB's 401: {status} {body}"
        );
        done.push("kv azure_cosmos ok (another account key: 401 to the guest)".into());
        let (status, body) = op(addr, "sqlite3", "", "db=remote")?;
        ensure!(
            status == 200,
            "spin:sqlite on libSQL (HTTPS): {status} {body}"
        );
        let rex: String = self
            .libsql
            .db()
            .query_row("SELECT name FROM pets WHERE age = 3", [], |r| r.get(0))
            .context("the row in the libSQL stand-in's SQLite database")?;
        ensure!(rex == "rex", "{rex:?}");
        done.push("sqlite on libSQL (HTTPS) ok".into());
        Ok(done.join(", "))
    }

    /// The pod does not trust the CA: every TLS backend is refused as untrusted.
    fn untrusted_checks(&self, addr: SocketAddr) -> Result<String> {
        for (name, server, rest, step) in [
            ("redis", self.rediss(), "", "open"),
            ("pg4", self.pg(), "", "open"),
            ("mysql", self.mysql(), "", "open"),
            ("mqtt", self.mqtts(), "topic=cri/tls&qos=1", "publish"),
        ] {
            let (status, body) = op(addr, name, &server, rest)?;
            ensure!(
                status == 500
                    && body.starts_with(&format!("error: {step}:"))
                    && body.contains("UnknownIssuer"),
                "{name} must refuse the untrusted certificate at `{step}`: {status} {body}"
            );
        }
        let (status, body) = curl("PUT", &format!("http://{addr}/kv/k"), "x")?;
        ensure!(status == 500, "kv rediss without the CA: {status} {body}");
        let (status, body) = op(addr, "sqlite3", "", "db=remote")?;
        ensure!(
            status == 500 && body.contains("UnknownIssuer"),
            "libSQL without the CA: {status} {body}"
        );
        Ok("redis, pg, mysql, mqtt, the rediss store and libSQL refuse the untrusted CA".into())
    }
}

fn start_node(images_dir: &str) -> Result<(Node, PathBuf)> {
    let dir = integration::shim_bin_dir().join(images_dir);
    let imgs = Images::build(&dir)?;
    let node = Node::start(ContainerdVersion::V1_7, LAYOUT, true)?;
    node.import(&imgs.pause)?;
    Ok((node, dir))
}

fn backends() -> Result<()> {
    const IMAGE: &str = "docker.io/library/spin-backends:cri";
    let b = Backends::start()?;
    let (node, dir) = start_node("cri-images-backends")?;
    import_app(&node, &dir, IMAGE, &b.manifest())?;
    // Without the CA the Vault and Key Vault providers would fail the start: the untrusted
    // pod gets its secrets from the container's env (`API_TOKEN`, `AZURE_SECRET`) instead.
    let rc_dir = tempfile::Builder::new().prefix("cri-rc-").tempdir()?;
    let rc = |trust: bool| rc_dir.path().join(format!("{trust}/runtime-config.toml"));
    for trust in [true, false] {
        std::fs::create_dir_all(rc(trust).parent().unwrap())?;
        std::fs::write(rc(trust), b.runtime_config(trust))?;
    }
    let dynamo = format!("http://{}", b.moto.addr);
    let logs = node.dir().join("pod-logs");
    // The service principal as a pod gets it from a secret; the loopback authority as
    // Azure's SDKs read it.
    let authority = b.azure.url();
    let azure = |secret: &'static str| {
        env(&[
            ("AZURE_AUTHORITY_HOST", &authority),
            ("AZURE_TENANT_ID", "cri-tenant"),
            ("AZURE_CLIENT_ID", "cri-client"),
            ("AZURE_CLIENT_SECRET", secret),
        ])
    };
    let spec = |trust: bool| ContainerSpec {
        name: "app".into(),
        image: IMAGE.into(),
        command: vec!["/".into()],
        envs: if trust {
            let mut e = env(&[
                ("SSL_CERT_FILE", "/etc/spin-ca/ca.pem"),
                ("AWS_ENDPOINT_URL_DYNAMODB", &dynamo),
            ]);
            e.extend(azure("cri-secret"));
            e
        } else {
            env(&[
                ("AWS_ENDPOINT_URL_DYNAMODB", &dynamo),
                ("API_TOKEN", "from-env"),
                ("AZURE_SECRET", "from-env"),
            ])
        },
        read_only_mounts: volumes(&rc(trust), trust.then_some(b.ca_dir.path())),
        ..Default::default()
    };
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let line = scenario::serve_in_pod(
            &mut cri,
            LAYOUT,
            &logs,
            "trusted",
            spec(true),
            Some(HEALTH),
            |a| b.trusted_checks(a),
        )
        .await
        .with_context(|| format!("pod trusting the CA\n{}", node.log_tail()))?;
        println!("backends(cri): {line}");
        let line = scenario::serve_in_pod(
            &mut cri,
            LAYOUT,
            &logs,
            "untrusted",
            spec(false),
            Some(HEALTH),
            |a| b.untrusted_checks(a),
        )
        .await
        .with_context(|| format!("pod without the CA\n{}", node.log_tail()))?;
        println!("backends(cri): {line}");
        let mut refused = spec(true);
        refused.envs.retain(|(k, _)| k != "AZURE_CLIENT_SECRET");
        refused.envs.extend(azure("wrong-secret"));
        let line = refused_start(&mut cri, &logs, "azure-refused", refused)
            .await
            .with_context(|| format!("pod with a wrong client secret\n{}", node.log_tail()))?;
        println!("backends(cri): {line}");
        anyhow::Ok(())
    })?;
    Ok(())
}

/// Runs `spec` in a new pod, where it must fail to start: waits (bounded) for the container
/// to exit non-zero, checks its log names the Key Vault provider and Entra ID's refusal,
/// then removes the pod (nothing left behind).
async fn refused_start(
    cri: &mut Cri,
    logs: &Path,
    name: &str,
    mut spec: ContainerSpec,
) -> Result<String> {
    let pod = scenario::spin_pod(cri, LAYOUT, name, logs).await?;
    let port = scenario::free_loopback_port()?;
    spec.envs
        .push(("SPIN_HTTP_LISTEN_ADDR".into(), format!("127.0.0.1:{port}")));
    let run = async {
        let id = cri
            .start_container(&pod.sandbox_id, &pod.spec, &spec)
            .await?;
        let deadline = Instant::now() + T;
        let state = loop {
            let state = cri.container_state(&id).await?;
            // CONTAINER_EXITED = 2 in the CRI enum.
            if state.starts_with("state=2 ") {
                break state;
            }
            ensure!(Instant::now() < deadline, "{name} did not exit: {state}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let log =
            std::fs::read_to_string(pod.spec.log_directory.join("app/0.log")).unwrap_or_default();
        let named = log.lines().find(|l| {
            l.contains("azure_key_vault provider")
                && l.contains("refused a token (HTTP 401)")
                && l.contains("invalid_client")
        });
        ensure!(
            !state.contains("exit_code=0 ") && named.is_some(),
            "{name}: the start must fail naming the provider and the refusal: {state}\n{log}"
        );
        cri.remove_container(&id, 10).await?;
        anyhow::Ok(format!(
            "{name}: exited ({state}), logged: {}",
            named.unwrap_or("")
        ))
    }
    .await;
    match run {
        Ok(line) => {
            pod.teardown(cri, &[]).await?;
            Ok(line)
        }
        Err(e) => {
            let _ = cri.remove_pod(&pod.sandbox_id).await;
            Err(e)
        }
    }
}

#[test]
fn tls_backends_and_dynamodb_from_a_pod_through_cri() {
    let Some(_s) = integration::root_test("tls_backends_and_dynamodb_from_a_pod_through_cri")
    else {
        return;
    };
    backends().unwrap_or_else(|e| panic!("{e:#}"));
}

/// The pod's log lines (every container log under `logs`) that contain `needle`.
/// Lines of the pods' CRI logs under `logs` holding `needle`, waiting up to 10 s for the
/// first: containerd copies a container's output into its log file after the container
/// wrote it, so a line logged while a response was sent can land after the response.
fn pod_log_lines(logs: &Path, needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut found = Vec::new();
        for pod in std::fs::read_dir(logs).into_iter().flatten().flatten() {
            for c in std::fs::read_dir(pod.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let text = std::fs::read_to_string(c.path().join("0.log")).unwrap_or_default();
                found.extend(
                    text.lines()
                        .filter(|l| l.contains(needle))
                        .map(String::from),
                );
            }
        }
        if !found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn limit_checks(
    addr: SocketAddr,
    blocked: &test_support::origin::Origin,
    held: &test_support::origin::Origin,
    logs: &Path,
) -> Result<String> {
    const REQUESTS: usize = 5;
    const CAP: usize = 2;
    let fetch = |url: &str| http_get(addr, &format!("/?url={}", url_encode(url)), T);
    let port = blocked.addr.port();
    let (status, body) = fetch(&format!("http://127.0.0.1:{port}/"))?;
    ensure!(
        status == 502 && body.contains("DestinationIpProhibited"),
        "127.0.0.1 is blocked: {status} {body}"
    );
    ensure!(blocked.served() == 0, "a blocked request reached 127.0.0.1");
    let logged = pod_log_lines(logs, "127.0.0.1 (in 127.0.0.1/32)");
    ensure!(
        logged
            .iter()
            .any(|l| l.contains("[outbound_networking] block_networks")),
        "the pod's log names the address, network and key: {logged:?}"
    );
    // Concurrent requests to the allowed address: at most CAP connections at the origin,
    // the others wait for a permit and then succeed.
    let url = format!("/?url={}", url_encode(&format!("http://127.0.0.2:{port}/")));
    let clients: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || http_get(addr, &url, T))
        })
        .collect();
    for done in 0..REQUESTS {
        let (open, most) = held
            .wait_open(CAP.min(REQUESTS - done))
            .map_err(anyhow::Error::msg)?;
        ensure!(
            open <= CAP && most <= CAP,
            "{open} requests open at the origin, at most {most}: the cap is {CAP}"
        );
        held.release();
    }
    for c in clients {
        let (status, body) = c.join().expect("client thread")?;
        ensure!(
            status == 200 && body.starts_with("upstream 200"),
            "a request beyond the cap must wait, then succeed: {status} {body}"
        );
    }
    let seen = held.seen();
    ensure!(
        (seen.most, seen.served) == (CAP, REQUESTS),
        "the origin saw {seen:?}"
    );
    Ok(format!(
        "127.0.0.1 blocked (502 DestinationIpProhibited, logged, 0 requests at it); \
         127.0.0.2: {REQUESTS} concurrent requests, at most {} open at the origin \
         (max_concurrent_requests = 1), all 200",
        seen.most
    ))
}

fn limits() -> Result<()> {
    const IMAGE: &str = "docker.io/library/spin-limits-outbound:cri";
    let blocked = test_support::origin::Origin::start("127.0.0.1:0", false);
    let held =
        test_support::origin::Origin::start(&format!("127.0.0.2:{}", blocked.addr.port()), true);
    let (node, dir) = start_node("cri-images-limits")?;
    import_app(
        &node,
        &dir,
        IMAGE,
        "spin_manifest_version = 2\n[application]\nname = \"limits\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{WASM_DIR}/spin_outbound.wasm\"\n\
         allowed_outbound_hosts = [\"http://*:*\"]\n",
    )?;
    let rc_dir = tempfile::Builder::new().prefix("cri-rc-").tempdir()?;
    let rc = rc_dir.path().join("runtime-config.toml");
    std::fs::write(
        &rc,
        "[outbound_networking]\nblock_networks = [\"127.0.0.1/32\"]\n\
         [outbound_http]\nmax_concurrent_requests = 1\n",
    )?;
    let logs = node.dir().join("pod-logs");
    let spec = ContainerSpec {
        name: "app".into(),
        image: IMAGE.into(),
        command: vec!["/".into()],
        read_only_mounts: volumes(&rc, None),
        ..Default::default()
    };
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let line =
            scenario::serve_in_pod(&mut cri, LAYOUT, &logs, "limits", spec, Some(HEALTH), |a| {
                limit_checks(a, &blocked, &held, &logs)
            })
            .await
            .with_context(|| format!("limits pod\n{}", node.log_tail()))?;
        println!("limits(cri): {line}");
        anyhow::Ok(())
    })?;
    Ok(())
}

#[test]
fn block_networks_and_http_cap_hold_in_a_pod_through_cri() {
    let Some(_s) = integration::root_test("block_networks_and_http_cap_hold_in_a_pod_through_cri")
    else {
        return;
    };
    limits().unwrap_or_else(|e| panic!("{e:#}"));
}
