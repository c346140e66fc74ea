//! The pod's trust store inside a confined container: the spin-hostifaces guest as a
//! spin-in-container image under `ctr run` (containerd 1.7, host network) reaches a
//! redis-server that serves TLS only (`--tls-port`, certificate from a private CA made by
//! the test) once the CA file is bind-mounted read-only into the container and named by
//! `SSL_CERT_FILE`, as SpinKube's caCertSecret does. The runtime reads the file after it has
//! confined itself (Landlock, seccomp, no capabilities), so this shows the read is within
//! what confinement allows. Without the variable the certificate is refused.
//! Run as root: `cargo test --release --workspace --test pod_trust_store -- --nocapture`.

use test_support::servers;

use anyhow::{ensure, Result};
use integration::{require_shim, workspace_root, CgroupMode, Containerd, ContainerdVersion};
use oci_image_builder::spin;

const IMAGE: &str = "docker.io/library/spin-hostifaces:trust";

fn run() -> Result<()> {
    require_shim()?;
    let pki = tempfile::tempdir()?;
    test_support::pki::make_pki(pki.path());
    // What the pod gets: the CA certificate alone, in its own directory.
    let secret = tempfile::tempdir()?;
    std::fs::copy(pki.path().join("ca.pem"), secret.path().join("ca.crt"))?;
    let redis = servers::redis_tls(pki.path());
    let wasm = match std::env::var("GUEST_APPS_DIR") {
        Ok(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => workspace_root().join("tests/apps/target/wasm32-wasip2/release"),
    }
    .join("spin_hostifaces.wasm");
    ensure!(
        wasm.is_file(),
        "{} is not built: run `make apps`",
        wasm.display()
    );
    let addr = format!("rediss://127.0.0.1:{}", redis.port);
    let app_dir = tempfile::tempdir()?;
    std::fs::write(
        app_dir.path().join("spin.toml"),
        format!(
            "spin_manifest_version = 2\n[application]\nname = \"trust\"\n\
             [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
             [component.c]\nsource = \"{}\"\nallowed_outbound_hosts = [\"{addr}\"]\n",
            wasm.display()
        ),
    )?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let tar = app_dir.path().join("image.tar");
    spin::container_image(IMAGE, app_dir.path(), &[])?.write_archive(&tar)?;
    c.import(&tar, false)?;
    let path = format!("/?op=redis&addr={}", servers::url_encode(&addr));

    let trusted: Vec<String> = [
        "--mount",
        &format!(
            "type=bind,src={},dst=/var/run/secrets/spin-ca,options=rbind:ro",
            secret.path().display()
        ),
        "--env",
        "SSL_CERT_FILE=/var/run/secrets/spin-ca/ca.crt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let app = c.run_spin_app(IMAGE, &trusted)?;
    let (status, body) = app.get(&path)?;
    println!("with SSL_CERT_FILE: {status}");
    ensure!(
        status == 200 && body.contains("get=Some(\"hello\")"),
        "with the CA mounted and SSL_CERT_FILE set: {status} {body}"
    );
    drop(app);

    let app = c.run_spin_app(IMAGE, &[])?;
    let (status, body) = app.get(&path)?;
    println!("without: {status} {body}");
    ensure!(
        body.starts_with("error: open:") && body.contains("UnknownIssuer"),
        "without SSL_CERT_FILE the private CA must be refused: {status} {body}"
    );
    drop(app);
    Ok(())
}

#[test]
fn a_ca_file_named_by_ssl_cert_file_is_trusted_inside_the_confined_container() {
    let Some(_s) = integration::root_test(
        "a_ca_file_named_by_ssl_cert_file_is_trusted_inside_the_confined_container",
    ) else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}
