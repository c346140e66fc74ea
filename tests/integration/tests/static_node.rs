//! Issue 21: the static release shim (`scripts/release.sh`, x86_64 musl) on a node without
//! libc. containerd 1.6 from the Debian package runs on a [`NoLibcNode`] (no loader, no libc
//! under `/lib`, `/lib64`, `/usr/lib`; containerd through a private copy of its own), and
//! the smoke scenarios of `shim.rs` / `spin.rs` run there through the static shim, each in a
//! kubelet-style pod cgroup: a WASI program via `ctr run` (stdout, args, exit 0), and a
//! Spin HTTP app answering a request and ending with 0 on SIGTERM. The control: the glibc
//! shim of `SHIM_BIN_DIR`, which runs on the host, cannot even start on that node.
//!
//! `RELEASE_SHIM_DIR` names the directory of the static shim (`make test` builds it and
//! sets it); without it the test is skipped loudly. Run as root:
//! `RELEASE_SHIM_DIR=... cargo test --release -p integration --test static_node -- --nocapture`.

use anyhow::{ensure, Context, Result};
use integration::images::WASI_HELLO;
use integration::{
    guest_apps_dir, http_get, output_with_timeout, pod_uid, require_shim, unique, wait_for,
    CgroupGuard, CgroupMode, Containerd, ContainerdConfig, ContainerdVersion, TestImages,
    SPIN_RUNTIME,
};
use oci_image_builder::spin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const SHIM: &str = "containerd-shim-spin-v2";

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `bin args` inside containerd's mount namespace (the no-libc node).
fn on_node(c: &Containerd, bin: &Path, args: &[&str]) -> Result<Output> {
    output_with_timeout(
        Command::new("nsenter")
            .arg(format!("--target={}", c.pid()))
            .arg("--mount")
            .arg("--")
            .arg(bin)
            .args(args),
        Duration::from_secs(30),
    )
}

/// Every running shim of this containerd is the static binary (by `/proc/<pid>/exe`).
fn shims_are(c: &Containerd, want: &Path) -> Result<()> {
    let pids = c.shim_pids();
    ensure!(!pids.is_empty(), "no shim process of this containerd runs");
    for pid in pids {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
        ensure!(
            exe == want,
            "shim pid {pid} runs {}, not the static {}",
            exe.display(),
            want.display()
        );
    }
    Ok(())
}

fn scenario(static_dir: &Path) -> Result<()> {
    let glibc_shim = require_shim()?;
    let static_shim = static_dir.join(SHIM).canonicalize().with_context(|| {
        format!(
            "{}/{SHIM} is missing: `scripts/release.sh build x86_64` builds it",
            static_dir.display()
        )
    })?;
    let dir = tempfile::tempdir()?;
    let images = TestImages::build(dir.path())?;
    // spin-hello's `hello` component, from GUEST_APPS_DIR.
    let wasm = guest_apps_dir().join("spin_hello.wasm");
    ensure!(
        wasm.is_file(),
        "{} is missing: run `make apps`",
        wasm.display()
    );
    let app_dir = dir.path().join("spin-hello");
    std::fs::create_dir(&app_dir)?;
    std::fs::write(
        app_dir.join("spin.toml"),
        format!(
            "spin_manifest_version = 2\n[application]\nname = \"spin-hello\"\n\
             [[trigger.http]]\nroute = \"/hello\"\ncomponent = \"hello\"\n\
             [component.hello]\nsource = {:?}\nenvironment = {{ COMPONENT = \"hello\" }}\n",
            wasm.display().to_string()
        ),
    )?;
    let spin_image = "docker.io/library/spin-hello:static-node";
    let spin_tar = dir.path().join("spin.tar");
    spin::container_image(spin_image, &app_dir, &[])?.write_archive(&spin_tar)?;

    let c = Containerd::start_with(
        ContainerdVersion::V1_6,
        CgroupMode::Host,
        &ContainerdConfig {
            shim_dir: Some(static_dir.to_path_buf()),
            no_libc: true,
            ..Default::default()
        },
    )?;

    // The node has no libc: the glibc shim, which runs on the host, cannot start there.
    let host = output_with_timeout(Command::new(&glibc_shim).arg("-v"), Duration::from_secs(30))?;
    ensure!(
        host.status.success(),
        "glibc shim -v on the host: {}",
        text(&host)
    );
    let control = on_node(&c, &glibc_shim, &["-v"])?;
    ensure!(
        !control.status.success()
            && String::from_utf8_lossy(&control.stderr).contains("No such file or directory"),
        "the glibc shim should not start on the no-libc node (its loader is absent), but: {:?} {}",
        control.status.code(),
        text(&control)
    );
    let v = on_node(&c, &static_shim, &["--version"])?;
    let vt = String::from_utf8_lossy(&v.stdout);
    ensure!(
        v.status.success()
            && vt.contains("target: x86_64-unknown-linux-musl")
            && vt.contains("libseccomp: linked static")
            && vt.contains("allocator: mimalloc")
            && vt.contains("executable: PIE (randomized base)"),
        "static shim --version on the no-libc node: {}",
        text(&v)
    );
    println!("static shim on the no-libc node:\n{vt}");

    c.import(&images.wasi_hello, false)?;
    c.import(&spin_tar, false)?;

    // A WASI program via `ctr run`, in a burstable pod's cgroup.
    let uid = pod_uid();
    let pod = format!("/kubepods/burstable/pod{uid}");
    let _pod_guard = CgroupGuard::new(&pod);
    let id = unique("w");
    let cgroup = format!("{pod}/{id}");
    let run = output_with_timeout(
        c.ctr().args([
            "run",
            "--rm",
            "--runtime",
            SPIN_RUNTIME,
            "--cgroup",
            &cgroup,
            "--env",
            "HELLO_ENV=node",
            WASI_HELLO,
            &id,
            "/wasi-hello.wasm",
            "a1",
        ]),
        Duration::from_secs(120),
    );
    if run.is_err() {
        c.force_remove(&id);
    }
    let run = run?;
    let out = String::from_utf8_lossy(&run.stdout);
    ensure!(
        run.status.code() == Some(0)
            && ["Hello from wasi-hello", "arg[1]=a1", "env HELLO_ENV=node"]
                .iter()
                .all(|w| out.lines().any(|l| l == *w)),
        "WASI hello through the static shim: {:?} {}\ncontainerd log:\n{}",
        run.status.code(),
        text(&run),
        c.log_tail(30)
    );

    // A Spin HTTP app, in a best-effort pod's cgroup, answering a request.
    let uid = pod_uid();
    let pod = format!("/kubepods/besteffort/pod{uid}");
    let _pod_guard2 = CgroupGuard::new(&pod);
    let id = unique("s");
    let cgroup = format!("{pod}/{id}");
    let port = integration::free_loopback_port()?;
    let listen = format!("SPIN_HTTP_LISTEN_ADDR=127.0.0.1:{port}");
    let r = (|| -> Result<()> {
        c.ctr_ok_in_within(
            integration::NAMESPACE,
            &[
                "run",
                "-d",
                "--net-host",
                "--runtime",
                SPIN_RUNTIME,
                "--cgroup",
                &cgroup,
                "--env",
                &listen,
                spin_image,
                &id,
                "/",
            ],
            Duration::from_secs(300),
        )?;
        let pid = c.wait_task_status(&id, "RUNNING", Duration::from_secs(30))?;
        shims_are(&c, &static_shim)?;
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
        ensure!(
            cg.lines().any(|l| l.ends_with(&cgroup)),
            "the Spin task is not in {cgroup}:\n{cg}"
        );
        let (status, body) = wait_for(Duration::from_secs(30), || http_get(port, "/hello").ok())
            .with_context(|| format!("no HTTP answer on 127.0.0.1:{port}\n{}", c.log_tail(30)))?;
        ensure!(
            status == 200 && body.contains("component=hello"),
            "GET /hello: {status} {body:?}"
        );
        c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &id])?;
        c.wait_task_status(&id, "STOPPED", Duration::from_secs(20))
            .context("the Spin task did not stop within 20 s of SIGTERM")?;
        let del = c.ctr_output(&["task", "delete", &id], Duration::from_secs(30))?;
        ensure!(
            del.status.code() == Some(0)
                && !String::from_utf8_lossy(&del.stderr).contains("non-zero exit code"),
            "a Spin app ended by SIGTERM should exit 0: {}",
            text(&del)
        );
        Ok(())
    })();
    c.force_remove(&id);
    r
}

#[test]
fn static_shim_runs_wasi_and_spin_on_a_node_without_libc() {
    let Some(_s) = integration::root_test("static_shim_runs_wasi_and_spin_on_a_node_without_libc")
    else {
        return;
    };
    let Some(dir) = std::env::var_os("RELEASE_SHIM_DIR").map(PathBuf::from) else {
        eprintln!(
            "\n!!!!! SKIPPED static_shim_runs_wasi_and_spin_on_a_node_without_libc: set RELEASE_SHIM_DIR \
             to the directory of the static shim (`make test` does) !!!!!\n"
        );
        return;
    };
    scenario(&dir).unwrap_or_else(|e| panic!("{e:#}"));
}
