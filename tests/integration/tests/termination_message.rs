//! A Wasm container's start failure reaches its termination-message file (issue 39, point 6).
//!
//! Kubelet bind-mounts a fresh empty file, `<kubelet root>/pods/<uid>/containers/<name>/<id>`,
//! at the container's `terminationMessagePath` (`/dev/termination-log` by default) and reads
//! it when the container exits: that is the `message` of CRI's ContainerStatus and what
//! `kubectl describe pod` shows. These tests mount such a file the way containerd's CRI
//! passes kubelet's mount (`ctr run --mount type=bind,...,options=rbind:rw`) into Spin and
//! WASI containers on a private containerd 1.7, and read it on the host after the container
//! ended: a missing variable (found after the runtime confined itself, when `/dev` is no
//! longer reachable), the same at a pod's own `terminationMessagePath`, an invalid WASI
//! program, and a healthy app (the file stays empty).
//! Run as root: `cargo test --release --workspace --test termination_message -- --nocapture`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{
    guest_apps_dir, pod_uid, require_shim, wait_for, CgroupMode, Containerd, ContainerdVersion,
};
use oci_image_builder::spin;

/// The spin-hello app with a component variable bound to a required application variable
/// nothing sets.
const MISSING_VARIABLE: &str = r#"spin_manifest_version = 2

[application]
name = "needs-a-secret"

[variables]
api_token = { required = true }

[[trigger.http]]
route = "/hello"
component = "hello"

[component.hello]
source = "spin_hello.wasm"
environment = { COMPONENT = "hello" }
[component.hello.variables]
token = "{{ api_token }}"
"#;

/// The spin-hello app, one route.
const HEALTHY: &str = r#"spin_manifest_version = 2

[application]
name = "healthy"

[[trigger.http]]
route = "/hello"
component = "hello"

[component.hello]
source = "spin_hello.wasm"
environment = { COMPONENT = "hello" }
"#;

/// A kubelet-style termination-message file below `dir`, empty and mode 0666 as kubelet
/// makes it.
fn kubelet_file(dir: &Path, container: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let d = dir
        .join("var/lib/kubelet/pods")
        .join(pod_uid())
        .join("containers")
        .join(container);
    std::fs::create_dir_all(&d)?;
    let f = d.join("5f2e8a1c");
    std::fs::write(&f, b"")?;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666))?;
    Ok(f)
}

/// `ctr run --mount` of `host` at `dst`, as containerd's CRI mounts kubelet's file.
fn mount_arg(host: &Path, dst: &str) -> Vec<String> {
    vec![
        "--mount".into(),
        format!(
            "type=bind,src={},dst={dst},options=rbind:rw",
            host.display()
        ),
    ]
}

/// Writes a Spin app (`manifest` beside spin-hello's component) as a spin-in-container
/// image `name` and imports it.
fn import_spin_app(c: &Containerd, dir: &Path, name: &str, manifest: &str) -> Result<()> {
    let app = dir.join(name.replace([':', '/'], "_"));
    std::fs::create_dir_all(&app)?;
    let wasm = guest_apps_dir().join("spin_hello.wasm");
    std::fs::copy(&wasm, app.join("spin_hello.wasm"))
        .with_context(|| format!("{} (run `make apps`)", wasm.display()))?;
    std::fs::write(app.join("spin.toml"), manifest)?;
    let tar = dir.join(format!(
        "{}.tar",
        app.file_name().unwrap().to_string_lossy()
    ));
    spin::container_image(name, &app, &[])?.write_archive(&tar)?;
    c.import(&tar, false)?;
    Ok(())
}

/// Runs `image` in the foreground (`cmd` as the command, else the image's) with `extra`
/// options until it exits; returns its exit code and what it printed.
fn run_to_exit(
    c: &Containerd,
    image: &str,
    cmd: Option<&str>,
    extra: &[String],
) -> Result<(i32, String)> {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let cmd: Vec<&str> = cmd.into_iter().collect();
    let (code, text) = c.run_to_exit(image, &extra, &cmd, Duration::from_secs(300))?;
    Ok((code.unwrap_or(-1), text))
}

fn read(f: &Path) -> Result<String> {
    std::fs::read_to_string(f).with_context(|| f.display().to_string())
}

fn start_failures_reach_the_termination_message() -> Result<()> {
    require_shim()?;
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;

    // A missing variable, at the default path.
    let image = "docker.io/library/needs-a-secret:tm";
    import_spin_app(&c, dir.path(), image, MISSING_VARIABLE)?;
    let file = kubelet_file(dir.path(), "app")?;
    let (code, log) = run_to_exit(
        &c,
        image,
        Some("/"),
        &mount_arg(&file, "/dev/termination-log"),
    )?;
    let msg = read(&file)?;
    println!("missing variable: exit {code}, termination message {msg:?}");
    ensure!(code != 0, "the app without its variable exited 0: {log}");
    ensure!(
        msg.contains("api_token") && msg.starts_with("Spin app: "),
        "the termination message does not name the missing variable: {msg:?}\nlog: {log}"
    );
    ensure!(log.contains("api_token"), "the log lost the error: {log}");

    // The same failure at a pod's own terminationMessagePath (found by the kubelet source).
    let file = kubelet_file(dir.path(), "custom")?;
    let (code, _) = run_to_exit(&c, image, Some("/"), &mount_arg(&file, "/why-i-died"))?;
    let msg = read(&file)?;
    println!("custom terminationMessagePath: exit {code}, termination message {msg:?}");
    ensure!(
        code != 0 && msg.contains("api_token"),
        "custom path: {msg:?}"
    );

    // An invalid WASI program (the WASI engine's failure).
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, b"\0asm\x01\0\0\0this is not a module")?;
    let wasi = "docker.io/library/bad-wasi:tm";
    let tar = dir.path().join("bad-wasi.tar");
    oci_image_builder::wasi_image(wasi, &bad, &[], &[])?.write_archive(&tar)?;
    c.import(&tar, false)?;
    let file = kubelet_file(dir.path(), "wasi")?;
    let (code, log) = run_to_exit(&c, wasi, None, &mount_arg(&file, "/dev/termination-log"))?;
    let msg = read(&file)?;
    println!("invalid WASI program: exit {code}, termination message {msg:?}");
    ensure!(
        code != 0 && msg.contains("failed:"),
        "invalid WASI program: {msg:?}\nlog: {log}"
    );

    // A healthy app leaves the file empty, also after SIGTERM.
    let image = "docker.io/library/healthy:tm";
    import_spin_app(&c, dir.path(), image, HEALTHY)?;
    let file = kubelet_file(dir.path(), "healthy")?;
    let app = c.run_spin_app(image, &mount_arg(&file, "/dev/termination-log"))?;
    let (status, body) = app.get("/hello")?;
    ensure!(status == 200, "healthy app: {status} {body}");
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    let stopped = wait_for(Duration::from_secs(20), || {
        c.task_list()
            .ok()?
            .into_iter()
            .find(|t| t.0 == app.id && t.2 == "STOPPED")
    });
    ensure!(stopped.is_some(), "the healthy app did not stop on SIGTERM");
    let msg = read(&file)?;
    println!("healthy app: termination message {msg:?}");
    ensure!(msg.is_empty(), "a healthy app wrote {msg:?}");
    Ok(())
}

#[test]
fn start_failures_reach_the_termination_message_file() {
    let Some(_s) = integration::root_test("start_failures_reach_the_termination_message_file")
    else {
        return;
    };
    start_failures_reach_the_termination_message().unwrap_or_else(|e| panic!("{e:#}"));
}
