//! Device rules of native containers (issue 14): a busybox container with CAP_MKNOD that
//! makes a node for a block device of the host and opens it is refused the open, on the hybrid
//! host (cgroup v1 devices controller) and on the pure cgroup v2 host (the shim's eBPF
//! device filter); with every device allowed (`--privileged`) the same read passes. On a v2 node
//! whose kernel refuses eBPF programs, native containers are refused at Create, the pod
//! sandbox (pause) and Wasm containers run.
//! Run as root: `cargo test --release -p integration --test devices -- --nocapture`.

use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::images::{BUSYBOX, PAUSE, WASI_HELLO};
use integration::{
    require_shim, test_runtime, unique, CgroupGuard, CgroupMode, Containerd, ContainerdConfig,
    ContainerdVersion, TestImages,
};

/// A block device of this host that root here can open (major, minor, /dev path): the
/// first of /sys/dev/block in order. (The disk holding `/` on these VMs is refused to root
/// on the host itself, so it would prove nothing.)
fn host_block_device() -> Result<(u32, u32, String)> {
    let mut entries: Vec<String> = std::fs::read_dir("/sys/dev/block")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    for mm in entries {
        let Some((major, minor)) = mm.split_once(':') else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) else {
            continue;
        };
        let uevent = std::fs::read_to_string(format!("/sys/dev/block/{mm}/uevent"))?;
        let Some(name) = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME=")) else {
            continue;
        };
        let path = format!("/dev/{name}");
        if std::fs::File::open(&path).is_ok() {
            return Ok((major, minor, path));
        }
    }
    anyhow::bail!("no block device of this host can be opened by root here")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Node {
    c: Containerd,
    root: String,
    _guard: CgroupGuard,
    _dir: tempfile::TempDir,
}

impl Node {
    fn start(mode: CgroupMode, config: &ContainerdConfig) -> Result<Node> {
        require_shim()?;
        let dir = tempfile::tempdir()?;
        let images = TestImages::build(dir.path())?;
        let c = Containerd::start_with(ContainerdVersion::V1_7, mode, config)?;
        c.import(&images.busybox, false)?;
        c.import(&images.pause, false)?;
        c.import(&images.wasi_hello, false)?;
        let root = unique("devices-");
        Ok(Node {
            c,
            _guard: CgroupGuard::new(&format!("/{root}")),
            root,
            _dir: dir,
        })
    }

    /// `ctr run --rm` of `image` with `cmd`, in a cgroup of the node's subtree.
    fn run(&self, extra: &[&str], image: &str, cmd: &[&str]) -> Result<Output> {
        let id = unique("dev");
        let cgroup = format!("/{}/{id}", self.root);
        let runtime = test_runtime();
        let mut args = vec!["run", "--rm", "--runtime", &runtime, "--cgroup", &cgroup];
        args.extend(extra);
        args.push(image);
        args.push(&id);
        args.extend(cmd);
        let out =
            integration::output_with_timeout(self.c.ctr().args(&args), Duration::from_secs(60));
        self.c.force_remove(&id);
        out
    }
}

/// mknod of the root disk's numbers, then a 1-byte read through the new node.
fn disk_script(major: u32, minor: u32) -> String {
    format!(
        "/bin/busybox mknod /dev/hostdisk b {major} {minor}; echo mknod=$?; \
         /bin/busybox head -c1 /dev/hostdisk >/dev/null; echo open=$?"
    )
}

fn host_disk_is_denied(mode: CgroupMode) -> Result<()> {
    let node = Node::start(mode, &ContainerdConfig::default())?;
    let (major, minor, path) = host_block_device()?;
    let script = disk_script(major, minor);

    // CAP_MKNOD is in containerd's default set: the node is made (mknod of any block
    // device is a default rule, as in runc), its open is refused.
    let o = node.run(&[], BUSYBOX, &["/bin/sh", "-c", &script])?;
    let t = text(&o);
    println!("{mode:?}, default rules, {path} ({major}:{minor}):\n{t}");
    ensure!(o.status.success(), "busybox failed: {t}");
    ensure!(
        t.contains("mknod=0"),
        "mknod of {major}:{minor} failed: {t}"
    );
    ensure!(
        t.contains("/dev/hostdisk: Operation not permitted") && t.contains("open=1"),
        "opening the host's {path} ({major}:{minor}) was not refused with EPERM: {t}"
    );

    // Control: with every device allowed by the spec (`--privileged`: rule `a rwm`) the
    // same mknod and read pass, so the refusal above is the device rules'.
    let o = node.run(&["--privileged"], BUSYBOX, &["/bin/sh", "-c", &script])?;
    let t = text(&o);
    println!("{mode:?}, --privileged ({path}):\n{t}");
    ensure!(
        t.contains("mknod=0") && t.contains("open=0"),
        "reading {major}:{minor} with every device allowed failed: {t}"
    );
    Ok(())
}

#[test]
fn host_disk_is_denied_host_cgroups() {
    let Some(_s) = integration::root_test("host_disk_is_denied_host_cgroups") else {
        return;
    };
    host_disk_is_denied(CgroupMode::Host).unwrap();
}

#[test]
fn host_disk_is_denied_unified_namespace() {
    let Some(_s) = integration::root_test("host_disk_is_denied_unified_namespace") else {
        return;
    };
    host_disk_is_denied(CgroupMode::UnifiedNamespace).unwrap();
}

/// A pure cgroup v2 node whose kernel refuses bpf(2) (a seccomp filter on containerd):
/// a native busybox is refused at Create, saying why; the pause image as a pod sandbox
/// and a WASI container run.
#[test]
fn native_refused_without_device_filter_unified_namespace() {
    let Some(_s) = integration::root_test("native_refused_without_device_filter_unified_namespace")
    else {
        return;
    };
    let r = (|| -> Result<()> {
        let node = Node::start(
            CgroupMode::UnifiedNamespace,
            &ContainerdConfig {
                deny_bpf: true,
                ..Default::default()
            },
        )?;
        let o = node.run(&[], BUSYBOX, &["/bin/true"])?;
        let t = text(&o);
        println!("native busybox:\n{t}");
        ensure!(
            !o.status.success(),
            "native busybox ran without a device filter: {t}"
        );
        ensure!(
            t.contains("refusing a native container")
                && t.contains("cannot enforce device rules")
                && t.contains("Operation not permitted"),
            "Create did not say why: {t}"
        );

        let o = node.run(&[], WASI_HELLO, &["/wasi-hello.wasm"])?;
        let t = text(&o);
        ensure!(
            o.status.success() && t.contains("Hello from wasi-hello"),
            "WASI container failed: {t}"
        );

        // The pause container of a pod (CRI marks it `sandbox`) runs.
        let id = unique("sandbox");
        let cgroup = format!("/{}/{id}", node.root);
        let runtime = test_runtime();
        let started = node.c.ctr_ok(&[
            "run",
            "-d",
            "--runtime",
            &runtime,
            "--cgroup",
            &cgroup,
            "--annotation",
            "io.kubernetes.cri.container-type=sandbox",
            PAUSE,
            &id,
        ]);
        let running = started.and_then(|_| {
            node.c
                .wait_task_status(&id, "RUNNING", Duration::from_secs(30))
        });
        node.c.force_remove(&id);
        running.context("the pause sandbox did not run")?;
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}
