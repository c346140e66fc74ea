//! Docker Engine's Wasm workflow with the shim (`docker run --runtime io.containerd.spin.v2`,
//! containerd image store): a real dockerd from Debian's `docker.io` packages, unpacked by
//! `scripts/install-docker.sh` (nothing installed over the system), with its own data root,
//! exec root, pidfile, socket and cgroup parent in a temp dir, `--bridge=none
//! --iptables=false` (apps on the host network, loopback-only ports), and its managed
//! containerd finding the shim on dockerd's PATH.
//!
//! Each line runs: a WASI program (output and exit code through `docker logs`/`docker
//! wait`), then the Spin hello app as a spin-in-container image and as a Spin OCI artifact
//! (`docker load`ed), each served on a loopback port through run, `docker logs` (no ANSI
//! escapes), `docker stop` + `docker start`, `docker restart`, and `--restart always`
//! after the app process is killed; and the command-trigger app with `--restart always`
//! restarted after it exits. Afterwards every container, the daemon and its containerd,
//! the mounts and netns files below the temp dir, the cgroup parent and the data dirs are
//! removed and checked gone.
//!
//! Docker 28 (Debian sid) on its containerd 2.x always runs. Docker 26 (Debian trixie) on
//! containerd 1.7, the line whose containerd record names no image, runs too unless
//! `DOCKER_TEST_LINES` leaves it out (`DOCKER_TEST_LINES=28`; default `26,28`).
//! Run as root: `cargo test --release --workspace --test docker -- --nocapture`.

use anyhow::{bail, ensure, Context, Result};
use integration::{
    free_loopback_port, http_get, install_script, output_with_timeout, require_shim, shim_bin_dir,
    unique, wait_for, workspace_root, CgroupGuard, SPIN_RUNTIME,
};
use oci_image_builder::spin::{self, FileLayout};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A Docker Engine line: the Debian package and the containerd it runs with.
#[derive(Debug, Clone, Copy)]
enum Line {
    /// Debian trixie's docker.io 26.1.x on containerd 1.7.
    Docker26,
    /// Debian sid's docker.io 28.x on containerd 2.x.
    Docker28,
}

impl Line {
    fn arg(self) -> &'static str {
        match self {
            Line::Docker26 => "26",
            Line::Docker28 => "28",
        }
    }
    fn containerd_script(self) -> &'static str {
        match self {
            Line::Docker26 => "scripts/install-containerd-1.7.sh",
            Line::Docker28 => "scripts/install-containerd-2.sh",
        }
    }
    /// Whether `DOCKER_TEST_LINES` (default `26,28`) selects this line.
    fn selected(self) -> bool {
        std::env::var("DOCKER_TEST_LINES")
            .unwrap_or_else(|_| "26,28".into())
            .split(',')
            .any(|l| l.trim() == self.arg())
    }
}

const CMD_TIMEOUT: Duration = Duration::from_secs(120);

/// A private dockerd and its managed containerd; dropped: everything removed.
struct Dockerd {
    dir: Option<tempfile::TempDir>,
    client: PathBuf,
    child: Option<Child>,
    cgroup_parent: String,
    cgroups: Option<CgroupGuard>,
}

impl Dockerd {
    fn start(line: Line) -> Result<Self> {
        let root = install_script("scripts/install-docker.sh", &[line.arg()])?;
        let containerd = install_script(line.containerd_script(), &[])?;
        let dir = tempfile::Builder::new()
            .prefix("shim-docker-")
            .tempdir_in("/tmp")?;
        let d = dir.path();
        let cgroup_parent = unique("/shimtest-docker-");
        let cgroups = CgroupGuard::new(&cgroup_parent);
        std::fs::write(
            d.join("daemon.json"),
            serde_json::json!({
                "features": { "containerd-snapshotter": true },
                "cgroup-parent": cgroup_parent,
            })
            .to_string(),
        )?;
        let path = format!(
            "{}:{}:{}:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            shim_bin_dir().display(),
            containerd.display(),
            root.join("usr/bin").display(),
            root.join("usr/sbin").display(),
        );
        let log = std::fs::File::create(d.join("dockerd.log"))?;
        let child = Command::new(root.join("usr/sbin/dockerd"))
            .env("PATH", path)
            .arg("--config-file")
            .arg(d.join("daemon.json"))
            .arg("--data-root")
            .arg(d.join("data"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--pidfile")
            .arg(d.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", d.join("docker.sock").display()))
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start dockerd")?;
        let mut dockerd = Dockerd {
            dir: Some(dir),
            client: root.join("usr/bin/docker"),
            child: Some(child),
            cgroup_parent,
            cgroups: Some(cgroups),
        };
        let up = wait_for(Duration::from_secs(60), || {
            if let Some(c) = dockerd.child.as_mut() {
                if !matches!(c.try_wait(), Ok(None)) {
                    return Some(false);
                }
            }
            let o = dockerd.docker_output(&["version"]).ok()?;
            o.status.success().then_some(true)
        });
        if up != Some(true) {
            bail!(
                "dockerd ({line:?}) did not come up within 60 s; its log ends:\n{}",
                dockerd.log_tail(30)
            );
        }
        Ok(dockerd)
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir").path()
    }

    fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir().join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn docker_output(&self, args: &[&str]) -> Result<Output> {
        output_with_timeout(
            Command::new(&self.client)
                .env(
                    "DOCKER_HOST",
                    format!("unix://{}", self.dir().join("docker.sock").display()),
                )
                .args(args),
            CMD_TIMEOUT,
        )
    }

    /// Runs `docker args`, which must succeed; returns its stdout.
    fn docker(&self, args: &[&str]) -> Result<String> {
        let o = self.docker_output(args)?;
        ensure!(
            o.status.success(),
            "docker {} failed ({:?}): {}{}",
            args.join(" "),
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    fn inspect(&self, name: &str, format: &str) -> Result<String> {
        self.docker(&["inspect", "-f", format, name])
    }

    /// `docker logs` (stdout and stderr together), checked free of terminal escapes.
    fn logs(&self, name: &str) -> Result<String> {
        let o = self.docker_output(&["logs", name])?;
        let all = [o.stdout, o.stderr].concat();
        ensure!(
            !all.contains(&0x1b),
            "docker logs {name} holds ANSI escape sequences: {:?}",
            String::from_utf8_lossy(&all)
        );
        Ok(String::from_utf8_lossy(&all).into_owned())
    }

    /// Removes every container, stops dockerd (and so its containerd) by pid, unmounts
    /// what is left below the temp dir, removes the cgroup parent and the temp dir; then
    /// checks that no process, mount or cgroup of this instance remains.
    fn shutdown(&mut self) -> Result<()> {
        if self.dir.is_none() {
            return Ok(());
        }
        if let Ok(ids) = self.docker(&["ps", "-aq"]) {
            for id in ids.lines().filter(|l| !l.is_empty()) {
                let _ = self.docker(&["rm", "-f", id]);
            }
        }
        let prefix = self.dir().to_string_lossy().into_owned();
        let ours = || -> Vec<i32> {
            integration::all_pids()
                .filter(|p| integration::cmdline(*p).iter().any(|a| a.contains(&prefix)))
                .collect()
        };
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if wait_for(Duration::from_secs(30), || child.try_wait().ok().flatten()).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // dockerd stops its containerd on the way out; anything still running from our
        // dir (a containerd or shim left by a crash) is ended by pid.
        for p in ours() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let left = wait_for(Duration::from_secs(10), || ours().is_empty().then_some(()));
        let mut mps = mounts_below(&prefix);
        mps.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in &mps {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        drop(self.cgroups.take());
        let cgroups_left = integration::cgroups::cgroup_exists(&self.cgroup_parent);
        let mounts_left = mounts_below(&prefix);
        let dir = self.dir.take().expect("dir");
        let path = dir.path().to_path_buf();
        dir.close()
            .with_context(|| format!("cannot remove {}", path.display()))?;
        ensure!(
            left.is_some(),
            "processes of {prefix} still run: {:?}",
            ours()
        );
        ensure!(
            mounts_left.is_empty(),
            "mounts left below {prefix}: {mounts_left:?}"
        );
        ensure!(cgroups_left.is_empty(), "cgroups left: {cgroups_left:?}");
        Ok(())
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("docker test cleanup: {e:#}");
        }
    }
}

fn mounts_below(prefix: &str) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    integration::cgroups::mount_points(&info)
        .into_iter()
        .filter(|m| m.starts_with(prefix))
        .collect()
}

/// Polls `GET /hello` on `port` until the hello component answers (or 60 s pass).
fn wait_hello(d: &Dockerd, name: &str, port: u16, when: &str) -> Result<()> {
    let ok = wait_for(Duration::from_secs(60), || {
        let (status, body) = http_get(port, "/hello").ok()?;
        (status == 200 && body.contains("component=hello")).then_some(())
    });
    if ok.is_none() {
        bail!(
            "{name} ({when}): no answer from the hello component on 127.0.0.1:{port} within 60 s; state {:?}, logs:\n{}\ndockerd:\n{}",
            d.inspect(name, "{{.State.Status}} {{.State.ExitCode}} {{.State.Error}}"),
            d.logs(name).unwrap_or_else(|e| format!("{e:#}")),
            d.log_tail(15)
        );
    }
    Ok(())
}

/// Waits until `name`'s `field` (a `docker inspect` template) satisfies `ok`.
fn wait_state(d: &Dockerd, name: &str, field: &str, ok: impl Fn(&str) -> bool) -> Result<String> {
    let mut last = String::new();
    let got = wait_for(Duration::from_secs(60), || {
        last = d.inspect(name, field).unwrap_or_else(|e| format!("{e:#}"));
        ok(&last).then(|| last.clone())
    });
    got.with_context(|| {
        format!(
            "{name}: {field} is still {last:?} after 60 s; logs:\n{}\ndockerd:\n{}",
            d.logs(name).unwrap_or_default(),
            d.log_tail(15)
        )
    })
}

/// The Spin hello app in image `image`: run, logs, stop + start, restart, and
/// `--restart always` bringing it back after its process is killed.
fn spin_lifecycle(d: &Dockerd, image: &str, platform: &str, form: &str) -> Result<()> {
    let name = format!("spin-{form}");
    let port = free_loopback_port()?;
    let listen = format!("SPIN_HTTP_LISTEN_ADDR=127.0.0.1:{port}");
    d.docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--runtime",
        SPIN_RUNTIME,
        "--platform",
        platform,
        "--network",
        "host",
        "--restart",
        "always",
        "-e",
        &listen,
        image,
        "/",
    ])?;
    wait_hello(d, &name, port, "run")?;
    let logs = d.logs(&name)?;
    ensure!(
        logs.contains(&format!("Serving http://127.0.0.1:{port}")),
        "{name}: docker logs lack the serving line: {logs}"
    );
    d.docker(&["stop", &name])?;
    wait_state(d, &name, "{{.State.Status}}", |s| s == "exited")?;
    ensure!(
        http_get(port, "/hello").is_err(),
        "{name}: still answering after docker stop"
    );
    d.docker(&["start", &name])?;
    wait_hello(d, &name, port, "docker start after stop")?;
    d.docker(&["restart", &name])?;
    wait_hello(d, &name, port, "docker restart")?;
    // Killed from outside (not by docker): the restart policy starts it again.
    let before: u32 = d.inspect(&name, "{{.RestartCount}}")?.parse()?;
    let pid: i32 = d.inspect(&name, "{{.State.Pid}}")?.parse()?;
    ensure!(pid > 0, "{name}: no pid while running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    wait_state(d, &name, "{{.RestartCount}}", |c| {
        c.parse::<u32>().is_ok_and(|c| c > before)
    })?;
    wait_hello(d, &name, port, "--restart always after SIGKILL")?;
    d.docker(&["rm", "-f", &name])?;
    Ok(())
}

fn docker_workflow(line: Line) -> Result<()> {
    require_shim()?;
    let apps = integration::guest_apps_dir();
    for wasm in ["wasi-hello.wasm", "spin_hello.wasm", "spin-command.wasm"] {
        ensure!(
            apps.join(wasm).is_file(),
            "{} is missing: run `make apps`",
            apps.join(wasm).display()
        );
    }
    let images = tempfile::tempdir()?;
    let tar = |n: &str| images.path().join(n);
    let root = workspace_root().join("tests/apps");
    let wasi = "docker.io/library/wasi-hello:docker";
    let container = "docker.io/library/spin-hello:container";
    let artifact = "docker.io/library/spin-hello:artifact";
    let command = "docker.io/library/spin-command:container";
    oci_image_builder::wasi_image(wasi, &apps.join("wasi-hello.wasm"), &[], &[])?
        .write_archive(&tar("wasi.tar"))?;
    spin::container_image(container, &root.join("spin-hello"), &[])?
        .write_archive(&tar("container.tar"))?;
    spin::artifact_image(artifact, &root.join("spin-hello"), FileLayout::Simple)?
        .write_archive(&tar("artifact.tar"))?;
    spin::container_image(command, &root.join("spin-command"), &[])?
        .write_archive(&tar("command.tar"))?;

    let mut d = Dockerd::start(line)?;
    for t in ["wasi.tar", "container.tar", "artifact.tar", "command.tar"] {
        d.docker(&["load", "-i", &tar(t).to_string_lossy()])?;
    }

    // A WASI program: output through docker logs, exit code through docker wait.
    d.docker(&[
        "run",
        "-d",
        "--name",
        "wasi",
        "--runtime",
        SPIN_RUNTIME,
        "--network",
        "none",
        wasi,
    ])?;
    let code = d.docker(&["wait", "wasi"])?;
    let logs = d.logs("wasi")?;
    ensure!(
        code == "0" && logs.contains("Hello from wasi-hello"),
        "wasi: exit {code}, logs {logs:?}"
    );
    d.docker(&["rm", "wasi"])?;

    spin_lifecycle(&d, container, "linux/amd64", "container")?;
    spin_lifecycle(&d, artifact, "wasip1/wasm", "artifact")?;

    // A command-trigger app that exits 3: `--restart always` runs it again and again.
    d.docker(&[
        "run",
        "-d",
        "--name",
        "command",
        "--runtime",
        SPIN_RUNTIME,
        "--network",
        "none",
        "--restart",
        "always",
        command,
        "/",
        "exit-code",
        "3",
    ])?;
    wait_state(&d, "command", "{{.RestartCount}}", |c| {
        c.parse::<u32>().is_ok_and(|c| c >= 2)
    })?;
    let runs = wait_for(Duration::from_secs(60), || {
        let n = d
            .logs("command")
            .ok()?
            .matches("argv=runner|exit-code|3")
            .count();
        (n >= 3).then_some(n)
    });
    ensure!(
        runs.is_some(),
        "command: fewer than 3 runs logged; logs:\n{}",
        d.logs("command")?
    );
    d.docker(&["rm", "-f", "command"])?;
    d.shutdown()
}

/// Runs the workflow on `line` unless not root or `DOCKER_TEST_LINES` leaves it out.
fn line_test(line: Line, test: &str) {
    let Some(_s) = integration::root_test(test) else {
        return;
    };
    if !line.selected() {
        eprintln!("\n!!!!! SKIPPED {test}: DOCKER_TEST_LINES leaves it out !!!!!\n");
        return;
    }
    docker_workflow(line).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn docker_28_on_containerd_2_runs_wasi_and_spin_through_restarts() {
    line_test(
        Line::Docker28,
        "docker_28_on_containerd_2_runs_wasi_and_spin_through_restarts",
    );
}

#[test]
fn docker_26_on_containerd_1_7_runs_wasi_and_spin_through_restarts() {
    line_test(
        Line::Docker26,
        "docker_26_on_containerd_1_7_runs_wasi_and_spin_through_restarts",
    );
}
