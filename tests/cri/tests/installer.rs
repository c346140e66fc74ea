//! Tests of `deployments/node-installer/install-node.sh` against config fixtures of each
//! containerd version and node flavour: after two runs the config parses (containerd itself
//! validates the 1.x ones), holds the `spin` runtime exactly once, sets no cgroup option,
//! and the first run kept a backup. Most runs pass `--no-restart`; the restart tests use a
//! `RESTART_CMD` that fails on demand (the restart against a live containerd is in
//! `tests/cri.rs`). Edited configs are checked with the real containerd 1.6 and 1.7 binaries.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/installer");
const SPIN_TYPE: &str = "io.containerd.spin.v2";

fn installer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deployments/node-installer/install-node.sh")
}

fn fixture(name: &str) -> String {
    fs::read_to_string(Path::new(FIXTURES).join(name))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// A fake node root with a shim binary to install.
struct Node {
    root: tempfile::TempDir,
    shim: PathBuf,
}

impl Node {
    fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("cri-installer-")
            .tempdir()
            .unwrap();
        let shim = root.path().join("shim-to-install");
        fs::write(&shim, b"#!/bin/sh\necho fake shim\n").unwrap();
        Node { root, shim }
    }

    fn path(&self, host_path: &str) -> PathBuf {
        self.root.path().join(host_path.trim_start_matches('/'))
    }

    fn put(&self, host_path: &str, text: &str) {
        let p = self.path(host_path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// Runs the installer with `--no-restart`; returns its stderr (the log).
    fn install(&self, env: &[(&str, &str)]) -> Result<String> {
        let (ok, log) = self.run(true, env)?;
        ensure!(ok, "install-node.sh failed:\n{log}");
        Ok(log)
    }

    /// Runs the installer (with `--no-restart` if `no_restart`): (success, its log). The
    /// script's pid is written to `<root>/installer.pid` first (it `exec`s the installer).
    fn run(&self, no_restart: bool, env: &[(&str, &str)]) -> Result<(bool, String)> {
        self.run_from(&["--shim".as_ref(), self.shim.as_os_str()], no_restart, env)
    }

    /// [`Node::run`] with `source` (`--shim FILE`, `--archive SRC ...`) naming the shim.
    fn run_from(
        &self,
        source: &[&std::ffi::OsStr],
        no_restart: bool,
        env: &[(&str, &str)],
    ) -> Result<(bool, String)> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("echo $$ >\"$0\"/installer.pid && exec sh \"$@\"")
            .arg(self.root.path())
            .arg(installer())
            .args(["--host-root"])
            .arg(self.root.path())
            .args(source);
        if no_restart {
            cmd.arg("--no-restart");
        }
        let out = cmd
            // The fake shim cannot run inside the fake (empty) root.
            .env("VERIFY_SHIM", "0")
            // The Makefile exports SHIM_BIN_DIR (where tests find the built shim); for the
            // installer it means the install directory on the node, so keep it out.
            .env_remove("SHIM_BIN_DIR")
            // The fake node's "host" is this machine as the test sees it: no nsenter.
            .env("HOST_NAMESPACES", "here")
            .envs(env.iter().copied())
            .output()
            .context("running install-node.sh")?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Two runs: the first changes things, the second must change nothing.
    fn install_twice(&self, env: &[(&str, &str)]) -> Result<()> {
        let first = self.install(env)?;
        ensure!(
            !first.contains("nothing changed"),
            "first run changed nothing:\n{first}"
        );
        let second = self.install(env)?;
        ensure!(
            second.contains("nothing changed; containerd not restarted"),
            "second run was not a no-op:\n{second}"
        );
        Ok(())
    }

    fn check_shim(&self, dir: &str) -> Result<()> {
        let installed = self.path(dir).join("containerd-shim-spin-v2");
        ensure!(
            fs::read(&installed).with_context(|| format!("{} missing", installed.display()))?
                == fs::read(&self.shim)?,
            "{} differs from the source",
            installed.display()
        );
        let mode = fs::metadata(&installed)?.permissions().mode();
        ensure!(
            mode & 0o111 != 0,
            "{} is not executable ({mode:o})",
            installed.display()
        );
        Ok(())
    }
}

/// Lines that open a `spin` runtime table (any quoting of the key).
fn spin_table_headers(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with('[')
                && (l.ends_with(".runtimes.spin]")
                    || l.ends_with(".runtimes.\"spin\"]")
                    || l.ends_with(".runtimes.'spin']"))
        })
        .count()
}

/// Parses `file` as TOML and checks the spin runtime under `plugin_path`.
fn check_runtime(file: &Path, plugin_path: &[&str], runtime_path: &str) -> Result<()> {
    let text = fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    ensure!(
        spin_table_headers(&text) == 1,
        "{} has {} spin runtime tables, want 1:\n{text}",
        file.display(),
        spin_table_headers(&text)
    );
    let doc: toml::Table = text
        .parse()
        .with_context(|| format!("{} is not valid TOML after the install", file.display()))?;
    let mut node = &toml::Value::Table(doc);
    for key in plugin_path
        .iter()
        .chain(["containerd", "runtimes", "spin"].iter())
    {
        node = node.get(key).with_context(|| {
            format!(
                "{}: no key {key:?} on the way to the spin runtime",
                file.display()
            )
        })?;
    }
    ensure!(
        node.get("runtime_type").and_then(|v| v.as_str()) == Some(SPIN_TYPE),
        "{}: spin runtime_type is {:?}",
        file.display(),
        node.get("runtime_type")
    );
    ensure!(
        node.get("runtime_path").and_then(|v| v.as_str()) == Some(runtime_path),
        "{}: spin runtime_path is {:?}, want {runtime_path}",
        file.display(),
        node.get("runtime_path")
    );
    ensure!(
        node.get("options").is_none() && !text.contains("SystemdCgroup = true\n# END"),
        "{}: the installer must set no runtime options (no cgroup option)",
        file.display()
    );
    Ok(())
}

/// `containerd --config file config dump` must accept the file and show the spin runtime.
fn containerd_accepts(containerd: &Path, file: &Path) -> Result<()> {
    let out = Command::new(containerd)
        .arg("--config")
        .arg(file)
        .args(["config", "dump"])
        .output()
        .with_context(|| format!("running {}", containerd.display()))?;
    let dump = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} rejects {}: {}",
            containerd.display(),
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let spin_section = dump
        .split_once(".runtimes.spin]")
        .with_context(|| {
            format!(
                "{} config dump of {} has no spin runtime",
                containerd.display(),
                file.display()
            )
        })?
        .1;
    ensure!(
        spin_section
            .lines()
            .take_while(|l| !l.trim_start().starts_with("[plugins") || l.contains("runtimes.spin"))
            .any(|l| l.trim() == format!("runtime_type = \"{SPIN_TYPE}\"")),
        "config dump lost the spin runtime_type"
    );
    Ok(())
}

fn containerd_16() -> PathBuf {
    PathBuf::from("/usr/bin/containerd")
}

/// containerd 1.7's binary, unpacked by scripts/install-containerd-1.7.sh (idempotent).
fn containerd_17() -> Result<PathBuf> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-containerd-1.7.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .context("running install-containerd-1.7.sh")?;
    ensure!(
        out.status.success(),
        "install-containerd-1.7.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()).join("containerd"))
}

const CRI_V1: &[&str] = &["plugins", "io.containerd.grpc.v1.cri"];
const CRI_V2: &[&str] = &["plugins", "io.containerd.cri.v1.runtime"];
const BIN: &str = "/usr/local/bin/containerd-shim-spin-v2";

fn plain_containerd(fixture_name: &str, containerd: Option<PathBuf>) -> Result<()> {
    let node = Node::new();
    let original = fixture(fixture_name);
    node.put("/etc/containerd/config.toml", &original);
    node.install_twice(&[])?;
    let config = node.path("/etc/containerd/config.toml");
    node.check_shim("/usr/local/bin")?;
    let backup = fs::read_to_string(node.path("/etc/containerd/config.toml.spin-backup"))?;
    ensure!(backup == original, "the backup is not the original config");
    // The original content is kept as it was, our block only appended.
    ensure!(
        fs::read_to_string(&config)?.starts_with(&original),
        "the installer altered existing lines"
    );
    let plugin = if original.contains("version = 3") {
        CRI_V2
    } else {
        CRI_V1
    };
    check_runtime(&config, plugin, BIN)?;
    if let Some(bin) = containerd {
        containerd_accepts(&bin, &config)?;
    }
    Ok(())
}

#[test]
fn containerd_1_6_default_config() -> Result<()> {
    plain_containerd("containerd-1.6.toml", Some(containerd_16()))
}

#[test]
fn containerd_1_7_default_config() -> Result<()> {
    plain_containerd("containerd-1.7.toml", Some(containerd_17()?))
}

#[test]
fn containerd_2_config_version_3() -> Result<()> {
    // No containerd 2.x binary here: the TOML structure is checked, not containerd's parse.
    plain_containerd("containerd-2.0.toml", None)
}

#[test]
fn missing_config_is_created_for_the_node_containerd() -> Result<()> {
    for (major, plugin) in [("1", CRI_V1), ("2", CRI_V2)] {
        let node = Node::new();
        node.install_twice(&[("CONTAINERD_MAJOR", major)])?;
        let config = node.path("/etc/containerd/config.toml");
        let text = fs::read_to_string(&config)?;
        let want = if major == "1" {
            "version = 2\n"
        } else {
            "version = 3\n"
        };
        ensure!(
            text.starts_with(want),
            "fresh config for containerd {major} must start with {want:?}:\n{text}"
        );
        check_runtime(&config, plugin, BIN)?;
        if major == "1" {
            containerd_accepts(&containerd_16(), &config)?;
        }
    }
    Ok(())
}

#[test]
fn missing_config_without_containerd_is_a_clear_error() {
    let node = Node::new();
    let err = node.install(&[]).unwrap_err().to_string();
    assert!(
        err.contains("CONTAINERD_MAJOR"),
        "error must name the fix: {err}"
    );
}

#[test]
fn k3s_and_rke2_templates() -> Result<()> {
    for distro in ["k3s", "rke2"] {
        let dir = format!("/var/lib/rancher/{distro}/agent/etc/containerd");
        let node = Node::new();
        node.put(&format!("{dir}/config.toml"), &fixture("k3s-config.toml"));
        node.install_twice(&[])?;
        let tmpl = node.path(&format!("{dir}/config.toml.tmpl"));
        ensure!(tmpl.exists(), "{distro}: config.toml.tmpl was not created");
        check_runtime(&tmpl, CRI_V1, BIN)?;
        let generated = node.path(&format!("{dir}/config.toml"));
        check_runtime(&generated, CRI_V1, BIN)?;
        containerd_accepts(&containerd_16(), &generated)?;
    }
    Ok(())
}

#[test]
fn k3s_with_containerd_2_uses_the_v3_template() -> Result<()> {
    let dir = "/var/lib/rancher/k3s/agent/etc/containerd";
    let node = Node::new();
    node.put(
        &format!("{dir}/config.toml"),
        &fixture("containerd-2.0.toml"),
    );
    node.install_twice(&[])?;
    ensure!(
        !node.path(&format!("{dir}/config.toml.tmpl")).exists(),
        "wrote the v2 template name"
    );
    check_runtime(
        &node.path(&format!("{dir}/config-v3.toml.tmpl")),
        CRI_V2,
        BIN,
    )
}

#[test]
fn k3s_existing_template_is_extended_not_replaced() -> Result<()> {
    let dir = "/var/lib/rancher/k3s/agent/etc/containerd";
    let node = Node::new();
    node.put(&format!("{dir}/config.toml"), &fixture("k3s-config.toml"));
    let user_tmpl = "{{ template \"base\" . }}\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/certs.d\"\n";
    node.put(&format!("{dir}/config.toml.tmpl"), user_tmpl);
    node.install_twice(&[])?;
    let text = fs::read_to_string(node.path(&format!("{dir}/config.toml.tmpl")))?;
    ensure!(
        text.starts_with(user_tmpl),
        "the user's template was not kept:\n{text}"
    );
    ensure!(
        spin_table_headers(&text) == 1,
        "template has the runtime {} times",
        spin_table_headers(&text)
    );
    ensure!(
        fs::read_to_string(node.path(&format!("{dir}/config.toml.tmpl.spin-backup")))? == user_tmpl,
        "no backup of the user's template"
    );
    Ok(())
}

#[test]
fn microk8s_template() -> Result<()> {
    let node = Node::new();
    let file = "/var/snap/microk8s/current/args/containerd-template.toml";
    node.put(file, &fixture("microk8s-containerd-template.toml"));
    node.install_twice(&[])?;
    check_runtime(&node.path(file), CRI_V1, BIN)
}

#[test]
fn k0s_drop_in() -> Result<()> {
    let node = Node::new();
    fs::create_dir_all(node.path("/etc/k0s"))?;
    node.install_twice(&[("CONTAINERD_MAJOR", "1")])?;
    node.check_shim("/usr/local/bin")?;
    node.check_shim("/var/lib/k0s/bin")?;
    let dropin = node.path("/etc/k0s/containerd.d/spin.toml");
    check_runtime(&dropin, CRI_V1, BIN)?;
    containerd_accepts(&containerd_16(), &dropin)
}

#[test]
fn hand_configured_spin_runtime_is_left_alone() -> Result<()> {
    // As a table, and as dotted keys below a `runtimes` table.
    for name in ["hand-configured-spin.toml", "dotted-spin.toml"] {
        let node = Node::new();
        let original = fixture(name);
        node.put("/etc/containerd/config.toml", &original);
        let log = node.install(&[])?;
        ensure!(
            log.contains("outside the managed block"),
            "{name}: no message about the existing runtime:\n{log}"
        );
        ensure!(
            fs::read_to_string(node.path("/etc/containerd/config.toml"))? == original,
            "{name}: config changed"
        );
    }
    Ok(())
}

#[test]
fn unversioned_config_gets_the_short_plugin_name() -> Result<()> {
    let node = Node::new();
    node.put(
        "/etc/containerd/config.toml",
        &fixture("unversioned-v1.toml"),
    );
    node.install_twice(&[])?;
    check_runtime(
        &node.path("/etc/containerd/config.toml"),
        &["plugins", "cri"],
        BIN,
    )?;
    containerd_accepts(&containerd_16(), &node.path("/etc/containerd/config.toml"))
}

#[test]
fn shim_update_alone_is_a_change() -> Result<()> {
    let node = Node::new();
    node.put(
        "/etc/containerd/config.toml",
        &fixture("containerd-1.6.toml"),
    );
    node.install_twice(&[])?;
    fs::write(&node.shim, b"#!/bin/sh\necho newer shim\n")?;
    let log = node.install(&[])?;
    ensure!(
        log.contains("installed shim"),
        "a new shim was not installed:\n{log}"
    );
    ensure!(
        !log.contains("nothing changed"),
        "a new shim must count as a change:\n{log}"
    );
    node.check_shim("/usr/local/bin")
}

/// The restart-pending marker on the fake node.
const PENDING: &str = "/var/lib/containerd-shim-spin-v2/restart-pending";

/// Files in the config directory besides the config itself (temp files, copies).
fn config_dir_extras(node: &Node) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(node.path("/etc/containerd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "config.toml")
        .collect();
    v.sort();
    v
}

#[test]
fn malformed_config_is_refused_by_containerd_and_left_unchanged() -> Result<()> {
    for containerd in [containerd_16(), containerd_17()?] {
        let node = Node::new();
        let original = fixture("malformed.toml");
        node.put("/etc/containerd/config.toml", &original);
        let bin = containerd.to_string_lossy().into_owned();
        let (ok, log) = node.run(false, &[("CONTAINERD_BIN", &bin), ("RESTART_CMD", "true")])?;
        ensure!(!ok, "{bin}: a malformed config was accepted:\n{log}");
        ensure!(
            log.contains("rejects") && log.contains("left unchanged") && log.contains("TOML"),
            "{bin}: the error must carry containerd's reason and say nothing changed:\n{log}"
        );
        ensure!(
            fs::read_to_string(node.path("/etc/containerd/config.toml"))? == original,
            "{bin}: the config was modified"
        );
        ensure!(
            config_dir_extras(&node).is_empty(),
            "{bin}: left files behind: {:?}",
            config_dir_extras(&node)
        );
        ensure!(
            !log.contains("restarting containerd"),
            "{bin}: restarted after refusing:\n{log}"
        );
    }
    Ok(())
}

#[test]
fn dotted_key_config_gets_the_runtime_and_containerd_loads_it() -> Result<()> {
    for containerd in [containerd_16(), containerd_17()?] {
        let node = Node::new();
        let original = fixture("dotted-keys.toml");
        node.put("/etc/containerd/config.toml", &original);
        let bin = containerd.to_string_lossy().into_owned();
        node.install_twice(&[("CONTAINERD_BIN", &bin), ("VALIDATE", "require")])?;
        let config = node.path("/etc/containerd/config.toml");
        check_runtime(&config, CRI_V1, BIN)?;
        containerd_accepts(&containerd, &config)?;
        ensure!(fs::read_to_string(&config)?.starts_with(&original));
    }
    Ok(())
}

/// A restart command that logs each call to `<root>/restarts` and fails while
/// `<root>/fail-restart` exists.
fn restart_cmd(node: &Node) -> String {
    let root = node.root.path().display();
    format!("echo restart >>{root}/restarts; test ! -e {root}/fail-restart")
}

fn restarts(node: &Node) -> usize {
    fs::read_to_string(node.path("/restarts"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn failing_restart_restores_the_config_and_the_next_run_retries() -> Result<()> {
    let node = Node::new();
    let original = fixture("containerd-1.7.toml");
    node.put("/etc/containerd/config.toml", &original);
    node.put("/fail-restart", "");
    let cmd = restart_cmd(&node);
    let bin = containerd_17()?.to_string_lossy().into_owned();
    let env = [
        ("RESTART_CMD", cmd.as_str()),
        ("CONTAINERD_BIN", bin.as_str()),
    ];
    let (ok, log) = node.run(false, &env)?;
    ensure!(!ok, "a failed restart must fail the run:\n{log}");
    ensure!(
        fs::read_to_string(node.path("/etc/containerd/config.toml"))? == original,
        "the config was not restored after the failed restart:\n{log}"
    );
    ensure!(
        restarts(&node) == 2,
        "want the failed restart and one on the restored config, got {}:\n{log}",
        restarts(&node)
    );
    ensure!(
        node.path(PENDING).exists(),
        "the owed restart was not recorded"
    );
    ensure!(
        config_dir_extras(&node) == ["config.toml.spin-backup"],
        "{:?}",
        config_dir_extras(&node)
    );
    // containerd is fine again: the next run changes the config and restarts.
    fs::remove_file(node.path("/fail-restart"))?;
    let (ok, log) = node.run(false, &env)?;
    ensure!(ok, "the retry failed:\n{log}");
    check_runtime(&node.path("/etc/containerd/config.toml"), CRI_V1, BIN)?;
    ensure!(
        restarts(&node) == 3 && !node.path(PENDING).exists(),
        "{log}"
    );
    ensure!(
        config_dir_extras(&node) == ["config.toml.spin-backup"],
        "{:?}",
        config_dir_extras(&node)
    );
    // And then nothing is owed.
    let (ok, log) = node.run(false, &env)?;
    ensure!(
        ok && log.contains("nothing changed") && restarts(&node) == 3,
        "{log}"
    );
    Ok(())
}

#[test]
fn run_killed_before_its_restart_is_restarted_by_the_next_run() -> Result<()> {
    let node = Node::new();
    node.put(
        "/etc/containerd/config.toml",
        &fixture("containerd-1.6.toml"),
    );
    let root = node.root.path().display().to_string();
    // The pod is killed while it restarts containerd (eviction, node drain).
    let killer = format!("kill -KILL $(cat {root}/installer.pid); sleep 5");
    let (ok, _) = node.run(false, &[("RESTART_CMD", &killer)])?;
    ensure!(!ok, "the run was not killed");
    ensure!(
        node.path(PENDING).exists(),
        "the owed restart was not recorded"
    );
    // Shim and config are current now, yet the restart is still owed.
    let cmd = restart_cmd(&node);
    let (ok, log) = node.run(false, &[("RESTART_CMD", &cmd)])?;
    ensure!(ok, "{log}");
    ensure!(
        log.contains("did not succeed") && !log.contains("nothing changed") && restarts(&node) == 1,
        "the owed restart was not made:\n{log}"
    );
    ensure!(!node.path(PENDING).exists());
    let (ok, log) = node.run(false, &[("RESTART_CMD", &cmd)])?;
    ensure!(
        ok && log.contains("nothing changed") && restarts(&node) == 1,
        "{log}"
    );
    Ok(())
}

#[test]
fn runtime_class_selects_the_label_the_installer_sets_after_success() -> Result<()> {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deployments");
    let ds = fs::read_to_string(deploy.join("node-installer/daemonset.yaml"))?;
    let rc = fs::read_to_string(deploy.join("runtimeclass.yaml"))?;
    let label = "containerd-shim-spin-v2.io/installed";
    ensure!(
        rc.contains(&format!("nodeSelector:\n    {label}: \"true\"")),
        "the RuntimeClass does not select {label}=true:\n{rc}"
    );
    // The label container comes after the install container: init containers run in order
    // and each only after the previous one succeeded.
    let install = ds
        .find("- name: install")
        .context("no install init container")?;
    let labeller = ds
        .find(&format!("\"{label}=true\""))
        .context("the DaemonSet does not set the label")?;
    ensure!(
        install < labeller,
        "the node is labelled before the install"
    );
    ensure!(
        ds.contains("maxUnavailable: 1"),
        "the DaemonSet rolls out without maxUnavailable"
    );
    Ok(())
}

/// A release archive as `scripts/release.sh archive` writes it, for this machine's
/// architecture, of a static ELF standing in for the shim (busybox-static's busybox: the
/// script refuses what is not an ELF of the archive's architecture); `node.shim` becomes
/// the file the archive holds. Returns (archive, its .sha256).
fn release_archive(node: &Node) -> Result<(PathBuf, PathBuf)> {
    let dist = node.root.path().join("dist");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/release.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["archive", std::env::consts::ARCH, "/bin/busybox"])
        .env("RELEASE_OUT", &dist)
        .output()?;
    ensure!(
        out.status.success(),
        "release.sh archive failed (is busybox-static installed?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = fs::read_dir(&dist)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .context("release.sh wrote no archive")?;
    let sum = PathBuf::from(format!("{}.sha256", archive.display()));
    ensure!(sum.is_file(), "{} missing", sum.display());
    let inner = Command::new("tar")
        .arg("-xzOf")
        .arg(&archive)
        .arg("containerd-shim-spin-v2")
        .output()?;
    ensure!(
        inner.status.success() && !inner.stdout.is_empty(),
        "archive holds no shim"
    );
    fs::write(&node.shim, inner.stdout)?;
    Ok((archive, sum))
}

#[test]
fn release_archive_file_is_verified_and_installed() -> Result<()> {
    let node = Node::new();
    node.put(
        "/etc/containerd/config.toml",
        &fixture("containerd-1.6.toml"),
    );
    let (archive, _) = release_archive(&node)?;
    // `{arch}` stands for this machine's architecture.
    let templated = archive
        .to_string_lossy()
        .replace(std::env::consts::ARCH, "{arch}");
    let (ok, log) = node.run_from(
        &["--archive".as_ref(), templated.as_ref()],
        true,
        &[("VALIDATE", "0")],
    )?;
    ensure!(ok, "install from {templated} failed:\n{log}");
    ensure!(log.contains("sha256") && log.contains("verified"), "{log}");
    node.check_shim("/usr/local/bin")?;
    check_runtime(&node.path("/etc/containerd/config.toml"), CRI_V1, BIN)
}

#[test]
fn release_archive_with_a_wrong_checksum_is_refused_and_nothing_installed() -> Result<()> {
    let node = Node::new();
    node.put(
        "/etc/containerd/config.toml",
        &fixture("containerd-1.6.toml"),
    );
    let (archive, sum) = release_archive(&node)?;
    // The .sha256 beside it names other bytes (as after a corrupted or swapped download).
    let text = fs::read_to_string(&sum)?;
    let flipped: String = text
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i == 0 {
                if c == '0' {
                    '1'
                } else {
                    '0'
                }
            } else {
                c
            }
        })
        .collect();
    fs::write(&sum, flipped)?;
    let before = fs::read_to_string(node.path("/etc/containerd/config.toml"))?;
    let other_digits = "ab".repeat(32);
    for (args, what) in [
        (
            vec!["--archive".as_ref(), archive.as_os_str()],
            "the .sha256 beside it",
        ),
        (
            vec![
                "--archive".as_ref(),
                archive.as_os_str(),
                "--sha256".as_ref(),
                other_digits.as_ref(),
            ],
            "--sha256 digits",
        ),
    ] {
        let (ok, log) = node.run_from(&args, true, &[("VALIDATE", "0")])?;
        ensure!(!ok, "a wrong checksum ({what}) was accepted:\n{log}");
        ensure!(
            log.contains("refused, nothing installed") && log.contains("was expected"),
            "unclear refusal ({what}):\n{log}"
        );
    }
    ensure!(
        !node.path("/usr/local/bin/containerd-shim-spin-v2").exists(),
        "a shim was installed from an archive that failed its checksum"
    );
    ensure!(
        fs::read_to_string(node.path("/etc/containerd/config.toml"))? == before,
        "the config changed"
    );
    Ok(())
}

#[test]
fn release_archive_for_another_architecture_is_refused() -> Result<()> {
    let node = Node::new();
    let other = if std::env::consts::ARCH == "aarch64" {
        "x86_64"
    } else {
        "aarch64"
    };
    let (archive, sum) = release_archive(&node)?;
    // Published under the other architecture's name, with its checksum beside it.
    let name = archive.file_name().unwrap().to_string_lossy().replace(
        &format!("-linux-{}.tar.gz", std::env::consts::ARCH),
        &format!("-linux-{other}.tar.gz"),
    );
    let renamed = archive.with_file_name(&name);
    fs::rename(&archive, &renamed)?;
    fs::rename(&sum, format!("{}.sha256", renamed.display()))?;
    let archive = renamed;
    let (ok, log) = node.run_from(
        &["--archive".as_ref(), archive.as_os_str()],
        true,
        &[("VALIDATE", "0"), ("CONTAINERD_MAJOR", "1")],
    )?;
    ensure!(!ok, "an {other} archive was installed on this node:\n{log}");
    ensure!(
        log.contains(&format!("is for {other} but this node is")),
        "{log}"
    );
    Ok(())
}

/// Over HTTP (curl, as a node installer fetches a release URL), from a loopback server
/// started here and stopped by its pid.
#[test]
fn release_archive_url_is_fetched_with_its_checksum() -> Result<()> {
    let node = Node::new();
    node.put(
        "/etc/containerd/config.toml",
        &fixture("containerd-1.6.toml"),
    );
    let (archive, _) = release_archive(&node)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(archive.parent().unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("python3 -m http.server")?;
    let r = (|| -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                std::time::Instant::now() < deadline,
                "the HTTP server did not come up"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let url = format!(
            "http://127.0.0.1:{port}/{}",
            archive.file_name().unwrap().to_string_lossy()
        );
        let (ok, log) = node.run_from(
            &["--archive".as_ref(), url.as_ref()],
            true,
            &[("VALIDATE", "0")],
        )?;
        ensure!(ok, "install from {url} failed:\n{log}");
        node.check_shim("/usr/local/bin")?;
        // A URL that is not there: a clear error, no shim change.
        let (ok, log) = node.run_from(
            &["--archive".as_ref(), format!("{url}.missing").as_ref()],
            true,
            &[("VALIDATE", "0")],
        )?;
        ensure!(
            !ok && log.contains("cannot fetch the shim archive"),
            "{log}"
        );
        Ok(())
    })();
    let _ = server.kill();
    let _ = server.wait();
    r
}

/// runtime-class-manager's downloader (its images/downloader/download_shim.sh, main branch)
/// fetches a platform's archive to a file named `containerd-shim-<Shim name>` (here `spin-v2`,
/// deployments/runtime-class-manager/shim.yaml), checks it with `sha256sum -c` against the
/// platform's `sha256`, unpacks it and copies the member `containerd-shim-<Shim name>` to the
/// node: the same steps here, with the archive's own `.sha256` (accepted) and a wrong digest
/// (refused).
#[test]
fn release_archive_installs_as_runtime_class_manager_fetches_it() -> Result<()> {
    let node = Node::new();
    let (archive, sum) = release_archive(&node)?;
    let digest = fs::read_to_string(&sum)?
        .split_whitespace()
        .next()
        .context("empty .sha256")?
        .to_string();
    let download = |sha: &str, run: &str| -> Result<(bool, PathBuf)> {
        let work = node.root.path().join(run);
        let (dl, tmp, assets) = (work.join("dl"), work.join("tmp"), work.join("assets"));
        for d in [&dl, &tmp, &assets] {
            fs::create_dir_all(d)?;
        }
        fs::copy(&archive, dl.join("containerd-shim-spin-v2"))?;
        let script = "set -e; name=containerd-shim-spin-v2; \
            tar -xzf \"$name\" -C \"$TMP\"; cp \"$TMP/$name\" \"$ASSETS\"; \
            echo \"$SHA $name\" | sha256sum -c -";
        let ok = Command::new("sh")
            .args(["-c", script])
            .current_dir(&dl)
            .env("TMP", &tmp)
            .env("ASSETS", &assets)
            .env("SHA", sha)
            .status()?
            .success();
        Ok((ok, assets))
    };
    let (ok, assets) = download(&digest, "rcm-good")?;
    ensure!(
        ok,
        "the downloader's steps failed with the archive's own sha256"
    );
    ensure!(
        fs::read(assets.join("containerd-shim-spin-v2"))? == fs::read(&node.shim)?,
        "the installed shim differs from the archive's"
    );
    let (ok, _) = download(&"0".repeat(64), "rcm-bad")?;
    ensure!(!ok, "a wrong sha256 was accepted");
    // The manifest names the archives `make release` writes, one platform per architecture.
    let manifest = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deployments/runtime-class-manager/shim.yaml"),
    )?;
    ensure!(manifest.contains("apiVersion: runtime.spinkube.dev/v1alpha1"));
    for arch in ["x86_64", "aarch64"] {
        let name = format!(
            "containerd-shim-spin-v2-{}-linux-{arch}.tar.gz",
            env!("CARGO_PKG_VERSION")
        );
        ensure!(
            manifest.contains(&format!("arch: {arch}")) && manifest.contains(&name),
            "shim.yaml has no {arch} platform for {name}"
        );
    }
    Ok(())
}
