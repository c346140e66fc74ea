//! Spin apps through `ctr run --runtime io.containerd.spin.v2` (smoke tests of issue 5's
//! image forms): the spin-in-container image of `tests/apps/spin-hello` on containerd 1.6
//! and 1.7, and the Spin OCI artifact form on containerd 1.7 (1.6 cannot `ctr run` them);
//! and a Spin 4 app (spin-sdk 6.x, a WASIp3 component, `tests/apps/sdk6-http`) in both forms.
//! Each serves HTTP on a loopback port of the host network and ends with status 0 on SIGTERM.
//! Run as root: `cargo test --release -p integration --test spin -- --nocapture`.

use anyhow::{ensure, Context, Result};
use integration::{
    require_shim, wait_for, workspace_root, CgroupMode, Containerd, ContainerdVersion,
};
use oci_image_builder::spin::{self, FileLayout};
use std::time::Duration;

/// Imports `archive`, runs it detached on the host network with the app listening on a
/// free loopback port, checks `/hello` answers from the `hello` component, then SIGTERM.
fn serve_and_stop(c: &Containerd, archive: &std::path::Path, name: &str, wasm: bool) -> Result<()> {
    c.import(archive, wasm)?;
    let app = c.run_spin_app(name, &[])?;
    let (status, body) = app.get("/hello")?;
    ensure!(
        status == 200 && body.contains("component=hello"),
        "GET /hello: {status} {body:?}"
    );
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    let st = wait_for(Duration::from_secs(20), || {
        c.task_list()
            .ok()?
            .into_iter()
            .find(|t| t.0 == app.id && t.2 == "STOPPED")
    });
    ensure!(
        st.is_some(),
        "the Spin task did not stop within 20 s of SIGTERM"
    );
    // `ctr task delete` reports a non-zero exit status either as its own exit code
    // (older ctr) or as a "non-zero exit code N" warning on stderr (newer ctr).
    let del = c.ctr_output(&["task", "delete", &app.id], Duration::from_secs(30))?;
    let stderr = String::from_utf8_lossy(&del.stderr);
    ensure!(
        del.status.code() == Some(0) && !stderr.contains("non-zero exit code"),
        "a Spin app ended by SIGTERM should exit 0; `ctr task delete` gave {:?}: {stderr}",
        del.status.code()
    );
    Ok(())
}

fn spin_container(version: ContainerdVersion) -> Result<()> {
    require_shim()?;
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(version, CgroupMode::Host)?;
    let app = workspace_root().join("tests/apps/spin-hello");
    let name = "docker.io/library/spin-hello:container";
    let tar = dir.path().join("c.tar");
    spin::container_image(name, &app, &[])?.write_archive(&tar)?;
    serve_and_stop(&c, &tar, name, false)
}

#[test]
fn spin_in_container_image_serves_http_on_containerd_1_6() {
    let Some(_s) = integration::root_test("spin_in_container_image_serves_http_on_containerd_1_6")
    else {
        return;
    };
    spin_container(ContainerdVersion::V1_6).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn spin_in_container_image_serves_http_on_containerd_1_7() {
    let Some(_s) = integration::root_test("spin_in_container_image_serves_http_on_containerd_1_7")
    else {
        return;
    };
    spin_container(ContainerdVersion::V1_7).unwrap_or_else(|e| panic!("{e:#}"));
}

/// A Spin OCI artifact (no rootfs, locked app in containerd's content store) served by
/// the shim; containerd 1.6 cannot unpack artifacts for `ctr run`, so 1.7 only.
#[test]
fn spin_artifact_serves_http_on_containerd_1_7() {
    let Some(_s) = integration::root_test("spin_artifact_serves_http_on_containerd_1_7") else {
        return;
    };
    let r = (|| {
        require_shim()?;
        let dir = tempfile::tempdir()?;
        let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
        let app = workspace_root().join("tests/apps/spin-hello");
        let name = "docker.io/library/spin-hello:artifact";
        let tar = dir.path().join("a.tar");
        spin::artifact_image(name, &app, FileLayout::Simple)?.write_archive(&tar)?;
        serve_and_stop(&c, &tar, name, true)
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

/// The Spin 4 app (spin-sdk 6.x: exports only `wasi:http/handler@0.3.0-rc-2026-03-15`)
/// through `ctr run` with the shim, as a spin-in-container image and as a Spin OCI artifact
/// on containerd 1.7: all three routes each time. Prints the time from `ctr run` to the
/// first answer for each (the first compiles the component, the second finds it in the
/// shim's compile cache).
#[test]
fn spin_sdk6_wasip3_app_serves_through_ctr_run_on_containerd_1_7() {
    let Some(_s) =
        integration::root_test("spin_sdk6_wasip3_app_serves_through_ctr_run_on_containerd_1_7")
    else {
        return;
    };
    let r = (|| {
        require_shim()?;
        let dir = tempfile::tempdir()?;
        let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
        let app_dir = workspace_root().join("tests/apps/sdk6-http");
        let wasm = workspace_root().join("tests/apps/target/wasm32-wasip2/release/sdk6_http.wasm");
        ensure!(
            wasm.is_file(),
            "{} is missing: run `make apps`",
            wasm.display()
        );
        let container = "docker.io/library/sdk6-http:container";
        let artifact = "docker.io/library/sdk6-http:artifact";
        let ctar = dir.path().join("c.tar");
        let atar = dir.path().join("a.tar");
        spin::container_image(container, &app_dir, &[])?.write_archive(&ctar)?;
        spin::artifact_image(artifact, &app_dir, FileLayout::Simple)?.write_archive(&atar)?;
        c.import(&ctar, false)?;
        c.import(&atar, true)?;
        let mut timings = Vec::new();
        for (name, form) in [(container, "container"), (artifact, "artifact")] {
            let t = std::time::Instant::now();
            let app = c.run_spin_app(name, &[])?;
            let (status, body) = app.get("/hello")?;
            let first = t.elapsed();
            ensure!(
                status == 200 && body == "sdk=6 route=/hello greeting=hello from spin-sdk 6\n",
                "{form}: GET /hello: {status} {body:?}"
            );
            let (status, body) = app.get("/echo/x/y")?;
            ensure!(
                status == 200 && body == "sdk=6 route=/echo path=/x/y\n",
                "{form}: GET /echo/x/y: {status} {body:?}"
            );
            let (status, body) = app.get("/stream")?;
            let want: String = (0..1000).map(|i| format!("line {i}\n")).collect();
            ensure!(
                status == 200 && body == want,
                "{form}: GET /stream: {status}, {} bytes",
                body.len()
            );
            timings.push((form, first));
            c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
            c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(20))
                .with_context(|| format!("{form}: SIGTERM"))?;
        }
        for (form, t) in timings {
            eprintln!(
                "sdk6-wasip3: ctr run ({form}) to first answer: {} ms, 3/3 routes",
                t.as_millis()
            );
        }
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}
