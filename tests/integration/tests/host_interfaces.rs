//! Spin host interfaces through the shim: the spin-hostifaces guest (spin-sdk 5.2) as a
//! spin-in-container image under `ctr run --runtime io.containerd.spin.v2` on containerd
//! 1.7, host network, against a real redis-server and PostgreSQL started by this test on
//! loopback, and SQLite's default database inside the container's rootfs.
//! Run as root: `cargo test --release -p integration --test host_interfaces -- --nocapture`.

use test_support::servers;

use anyhow::{ensure, Result};
use integration::{require_shim, workspace_root, CgroupMode, Containerd, ContainerdVersion};
use oci_image_builder::spin;

fn guest_wasm() -> Result<std::path::PathBuf> {
    let dir = match std::env::var("GUEST_APPS_DIR") {
        Ok(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => workspace_root().join("tests/apps/target/wasm32-wasip2/release"),
    };
    let wasm = dir.join("spin_hostifaces.wasm");
    ensure!(
        wasm.is_file(),
        "{} is not built: run `make apps`",
        wasm.display()
    );
    Ok(wasm)
}

fn run() -> Result<()> {
    require_shim()?;
    let redis = servers::redis();
    let pg = servers::postgres();
    let app_dir = tempfile::tempdir()?;
    std::fs::write(
        app_dir.path().join("spin.toml"),
        format!(
            "spin_manifest_version = 2\n[application]\nname = \"hostifaces\"\n\
             [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
             [component.c]\nsource = \"{}\"\nsqlite_databases = [\"default\"]\n\
             allowed_outbound_hosts = [\"redis://127.0.0.1:{}\", \"postgres://127.0.0.1:{}\"]\n",
            guest_wasm()?.display(),
            redis.port,
            pg.port
        ),
    )?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let tar = app_dir.path().join("image.tar");
    let name = "docker.io/library/spin-hostifaces:test";
    spin::container_image(name, app_dir.path(), &[])?.write_archive(&tar)?;
    c.import(&tar, false)?;
    let app = c.run_spin_app(name, &[])?;

    let (status, body) = plain_get(&app, "/?op=sqlite3")?;
    ensure!(status == 200, "sqlite3: {status} {body}");
    ensure!(
        body.contains("row=Some([Text(\"rex\"), Integer(3), Real(4.5), Blob([1, 2]), Null])"),
        "sqlite3: {body}"
    );

    let addr = servers::url_encode(&format!("redis://127.0.0.1:{}", redis.port));
    let (status, body) = plain_get(&app, &format!("/?op=redis&addr={addr}"))?;
    ensure!(status == 200, "redis: {status} {body}");
    ensure!(
        body.contains("get=Some(\"hello\")") && body.contains("smembers=[\"a\", \"c\"]"),
        "redis: {body}"
    );

    let addr = servers::url_encode(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        pg.port
    ));
    let (status, body) = plain_get(&app, &format!("/?op=pg4&addr={addr}"))?;
    ensure!(status == 200, "pg4: {status} {body}");
    ensure!(
        body.contains("row0=[Str(\"widget\"), Int32(7)"),
        "pg4: {body}"
    );
    let (status, body) = plain_get(&app, &format!("/?op=pg2&addr={addr}"))?;
    ensure!(
        status == 200 && body.contains("row=Some([Str(\"gizmo\"), Int64(-5)])"),
        "pg2: {status} {body}"
    );

    // Not in allowed_outbound_hosts: refused inside the container as by spin-serve.
    let denied = servers::url_encode(&format!("redis://127.0.0.1:{}", redis.port + 1));
    let (status, body) = plain_get(&app, &format!("/?op=redis&addr={denied}"))?;
    ensure!(
        status == 500 && body == "error: open: InvalidAddress",
        "denied redis: {status} {body}"
    );
    drop(app);
    Ok(())
}

#[test]
fn spin_host_interfaces_answer_through_the_shim_on_containerd_1_7() {
    let Some(_s) =
        integration::root_test("spin_host_interfaces_answer_through_the_shim_on_containerd_1_7")
    else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}

/// GET `path` and return its body with the `Type::` prefixes that wit-bindgen's Debug puts
/// before variant names removed (`Value::Text` -> `Text`), so expectations read like the WIT.
fn plain_get(app: &integration::SpinApp<'_>, path: &str) -> anyhow::Result<(u16, String)> {
    let (status, body) = app.get(path)?;
    let mut out = String::with_capacity(body.len());
    let mut rest = body.as_str();
    while let Some(i) = rest.find("::") {
        let (head, tail) = rest.split_at(i);
        let start = head
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        if head[start..].starts_with(|c: char| c.is_ascii_uppercase()) {
            out.push_str(&head[..start]);
        } else {
            out.push_str(head);
            out.push_str("::");
        }
        rest = &tail[2..];
    }
    out.push_str(rest);
    Ok((status, out))
}
