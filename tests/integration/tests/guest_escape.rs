//! Hostile guests against the runtime process (issue 35, points 1, 2 and 11), through
//! `ctr run --runtime io.containerd.spin.v2` on a private containerd 1.7 on this host's
//! cgroups (hybrid v1 here):
//! - the WASI guest `tests/apps/wasi-escape` (built from source by `make apps`) tries
//!   `/proc/self/mem`, the environ blocks, `/proc`, `/sys`, cgroupfs, device nodes, links
//!   planted in the image to `/proc` and `/dev`, and a device node the image carries; every
//!   attempt must be denied while a file of the image stays readable and `/tmp`, `/data`
//!   writable; its environment is the spec's
//!   only (containerd's and the shim's variables absent, also from the runtime process's
//!   `/proc/<pid>/environ`); every thread of the runtime process has no capability
//!   (effective, permitted, ambient, bounding), no_new_privs and a seccomp filter;
//! - the same on a node without Landlock (a shim wrapper makes `landlock_create_ruleset`
//!   fail with `ENOSYS`): the guest's preopens leave the kernel's filesystems out, and the
//!   runtime says once why;
//! - a Spin app whose `files` mount the whole rootfs cannot read `/proc`, `/sys` or `/dev`
//!   through it, and its runtime process is confined the same way; one whose `files` source
//!   is a link to `/proc` is refused;
//! - under `ctr run --memory-limit 268435456` a Spin request allocating in a loop fails alone
//!   (500) and the container keeps serving, with no OOM kill in its memory cgroup.
//!
//! Run as root: `cargo test --release --workspace --test guest_escape -- --nocapture`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{
    guest_apps_dir, require_shim, test_runtime, unique, wait_for, workspace_root, CgroupGuard,
    CgroupMode, Containerd, ContainerdConfig, ContainerdVersion,
};
use oci_image_builder::hostile::{self, RawEntry};
use oci_image_builder::{rootfs_image, ProcessConfig, TarTree};

/// A variable of containerd's (and so the shim's) environment no container may see.
const SECRET: (&str, &str) = ("SHIM_TEST_SECRET", "node-credential-7f3a");
/// Variables the shim inherits from containerd or gets from it, which no container may see.
const SHIM_VARS: &[&str] = &["GRPC_ADDRESS", "TTRPC_ADDRESS", "NAMESPACE", SECRET.0];

/// A private containerd 1.7 whose environment (and so the shim's) holds [`SECRET`]; the
/// shim logs libcontainer's debug lines, which its container-creation helper writes.
fn start_containerd() -> Result<Containerd> {
    start_containerd_with(None)
}

/// [`start_containerd`] starting the `containerd-shim-spin-v2` in `shim_dir` (else the built
/// one).
fn start_containerd_with(shim_dir: Option<std::path::PathBuf>) -> Result<Containerd> {
    require_shim()?;
    Containerd::start_with(
        ContainerdVersion::V1_7,
        CgroupMode::Host,
        &ContainerdConfig {
            env: vec![
                (SECRET.0.to_string(), SECRET.1.to_string()),
                ("RUST_LOG".to_string(), HELPER_LOG_FILTER.to_string()),
            ],
            shim_dir,
            ..Default::default()
        },
    )
}

/// A node without Landlock (a kernel built without it, or `lsm=` leaving it out), as far as
/// the shim can tell: a `containerd-shim-spin-v2` in `dir` that installs a seccomp filter
/// failing `landlock_create_ruleset` with `ENOSYS`, then execs the built shim (its server,
/// helper and containers inherit the filter). Compiled with gcc (x86_64).
fn shim_without_landlock(dir: &Path) -> Result<()> {
    let real = require_shim()?;
    let src = dir.join("nolandlock.c");
    std::fs::write(
        &src,
        format!(
            r#"#include <errno.h>
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {{
    (void)argc;
    struct sock_filter f[] = {{
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_landlock_create_ruleset, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    }};
    struct sock_fprog prog = {{ sizeof f / sizeof f[0], f }};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 97;
    execv("{real}", argv);
    return 98;
}}
"#,
            real = real.display()
        ),
    )?;
    let out = integration::output_with_timeout(
        std::process::Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(dir.join("containerd-shim-spin-v2"))
            .arg(&src),
        Duration::from_secs(120),
    )?;
    ensure!(
        out.status.success(),
        "gcc failed for {} (install gcc and libc6-dev): {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The shim's `RUST_LOG` in these tests: libcontainer's debug lines come from the
/// container-creation helper, whose environment is empty, so they show that its log filter
/// still reaches it.
const HELPER_LOG_FILTER: &str = "info,libcontainer::process::container_main_process=debug";

fn import(c: &Containerd, dir: &Path, img: &oci_image_builder::Image) -> Result<()> {
    let tar = dir.join(format!("{}.tar", unique("img")));
    img.write_archive(&tar)?;
    c.import(&tar, false)?;
    std::fs::remove_file(&tar)?;
    Ok(())
}

/// Capabilities, no_new_privs and seccomp of every thread of `pid`, from the host; an
/// error names each thread and field that is not confined.
fn check_confined(pid: i32) -> Result<usize> {
    let mut bad = Vec::new();
    let mut threads = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid = e?.file_name().to_string_lossy().into_owned();
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))?;
        threads += 1;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        for (name, want) in [
            ("CapEff", "0000000000000000"),
            ("CapPrm", "0000000000000000"),
            ("CapInh", "0000000000000000"),
            ("CapAmb", "0000000000000000"),
            ("CapBnd", "0000000000000000"),
            ("NoNewPrivs", "1"),
            ("Seccomp", "2"),
        ] {
            let got = field(name);
            if got != want {
                bad.push(format!("thread {tid} ({}): {name} {got}", field("Name")));
            }
        }
    }
    ensure!(
        bad.is_empty(),
        "runtime process {pid} is not confined: {}",
        bad.join("; ")
    );
    Ok(threads)
}

/// `/proc/<pid>/environ` of the runtime process as NAME=VALUE entries.
fn proc_environ(pid: i32) -> Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect())
}

/// The escape image: wasi-escape as entrypoint (args `hold 60`), a file to read, a `/data`
/// to write into, and links to `/proc` and `/dev`.
fn escape_image(name: &str) -> Result<oci_image_builder::Image> {
    let wasm = guest_apps_dir().join("wasi-escape.wasm");
    ensure!(
        wasm.is_file(),
        "{} is missing: run `make apps`",
        wasm.display()
    );
    let mut t = TarTree::new();
    t.add_host_file(&wasm, "wasi-escape.wasm")?;
    t.add_file("etc/escape-test.txt", b"image file\n".to_vec(), 0o644)?;
    t.add_dir("data")?;
    t.add_symlink("plink", "proc")?;
    t.add_symlink("data/devlink", "../dev")?;
    let mut img = rootfs_image(
        name,
        t,
        &ProcessConfig {
            entrypoint: vec!["/wasi-escape.wasm".into()],
            cmd: vec!["hold".into(), "60".into()],
            env: vec!["IMAGE_VAR=from-image".into()],
            ..Default::default()
        },
    )?;
    // A device node the image carries (containerd unpacks it as it is): /dev/zero's 1:5.
    hostile::add_raw_rootfs_layer(
        &mut img,
        &[
            RawEntry::Dir("devs".into()),
            RawEntry::Device("devs/zero".into(), 1, 5),
        ],
    )?;
    Ok(img)
}

#[test]
fn wasi_guest_cannot_reach_the_runtime_or_the_host() {
    let Some(_s) = integration::root_test("wasi_guest_cannot_reach_the_runtime_or_the_host") else {
        return;
    };
    (|| wasi_escape(&start_containerd()?).map(|_| ()))().unwrap_or_else(|e| panic!("{e:#}"));
}

/// Without Landlock the guest's view leaves the kernel's filesystems out: the same attempts
/// fail, the same controls work, and the shim says why once.
#[test]
fn wasi_guest_view_without_landlock() {
    let Some(_s) = integration::root_test("wasi_guest_view_without_landlock") else {
        return;
    };
    (|| -> Result<()> {
        let shim = tempfile::tempdir()?;
        shim_without_landlock(shim.path())?;
        let c = start_containerd_with(Some(shim.path().to_path_buf()))?;
        let stderr = wasi_escape(&c)?;
        ensure!(
            stderr.contains("Landlock is unavailable (the kernel is built without Landlock"),
            "the runtime did not say that Landlock is missing:\n{stderr}"
        );
        Ok(())
    })()
    .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Runs wasi-escape on `c`, checks what the module docs say and returns its stderr.
fn wasi_escape(c: &Containerd) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let name = "docker.io/library/wasi-escape:test";
    import(c, dir.path(), &escape_image(name)?)?;
    let id = unique("escape");
    let root = unique("escape-");
    let _guard = CgroupGuard::new(&root);
    let cgroup = format!("/{root}/{id}");
    let runtime = test_runtime();
    let mut child = c
        .ctr()
        .args([
            "run",
            "--rm",
            "--runtime",
            &runtime,
            "--cgroup",
            &cgroup,
            "--env",
            "SPEC_VAR=from-spec",
            name,
            &id,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting ctr run")?;
    let out = Arc::new(Mutex::new(String::new()));
    let err = Arc::new(Mutex::new(String::new()));
    let collect = |pipe: Box<dyn std::io::Read + Send>, buf: &Arc<Mutex<String>>| {
        let buf = buf.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(|l| l.ok()) {
                let mut b = buf.lock().unwrap();
                b.push_str(&line);
                b.push('\n');
            }
        })
    };
    let readers = [
        collect(Box::new(child.stdout.take().context("ctr stdout")?), &out),
        collect(Box::new(child.stderr.take().context("ctr stderr")?), &err),
    ];
    let holding = wait_for(Duration::from_secs(60), || {
        out.lock().unwrap().contains("\nHOLDING\n").then_some(())
    });
    let checked = (|| -> Result<(usize, Vec<String>)> {
        ensure!(
            holding.is_some(),
            "the guest never reached HOLDING; its output:\n{}\ncontainerd log:\n{}",
            out.lock().unwrap(),
            c.log_tail(20)
        );
        let pid = c
            .task_pid(&id)
            .with_context(|| format!("task {id} is not listed"))?;
        let environ = proc_environ(pid)?;
        Ok((check_confined(pid)?, environ))
    })();
    c.force_remove(&id);
    let status = wait_for(Duration::from_secs(30), || child.try_wait().ok().flatten());
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    for r in readers {
        let _ = r.join();
    }
    let out = out.lock().unwrap().clone();
    let err = err.lock().unwrap().clone();
    println!("--- wasi-escape output ---\n{out}--- stderr ---\n{err}--- end ---");
    let (threads, environ) = checked?;
    println!("runtime process: {threads} thread(s) confined; environ {environ:?}");

    let escapes: Vec<&str> = out.lines().filter(|l| l.starts_with("ESCAPE ")).collect();
    ensure!(escapes.is_empty(), "the guest escaped: {escapes:#?}");
    for denied in [
        "proc-self-mem-write",
        "proc-self-mem-open",
        "proc-self-environ",
        "proc-1-environ",
        "proc-list",
        "sys-cgroup-list",
        "sys-list",
        "dev-list",
        "dev-open-dev-null",
        "link-proc-environ",
        "link-proc-mem",
        "link-dev-null",
        "image-device",
    ] {
        ensure!(
            out.lines()
                .any(|l| l.starts_with(&format!("DENIED {denied}:"))),
            "no DENIED line for {denied}:\n{out}"
        );
    }
    for ok in ["image-file", "write-tmp", "write-data"] {
        ensure!(
            out.lines().any(|l| l.starts_with(&format!("OK {ok}:"))),
            "control {ok} failed:\n{out}"
        );
    }
    // The guest's environment is the spec's: the image's and ctr's variables, nothing of
    // containerd's or the shim's.
    let env: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("ENV ")).collect();
    ensure!(
        env.contains(&"SPEC_VAR=from-spec") && env.contains(&"IMAGE_VAR=from-image"),
        "the spec's variables are missing from the guest's environment: {env:?}"
    );
    for e in env
        .iter()
        .copied()
        .chain(environ.iter().map(String::as_str))
    {
        let name = e.split('=').next().unwrap_or_default();
        ensure!(
            !SHIM_VARS.contains(&name) && !e.contains(SECRET.1),
            "a variable of the shim's environment reached the container: {e}"
        );
    }
    // The helper still logs as the shim's RUST_LOG says (libcontainer's main process runs
    // in it).
    let log = std::fs::read_to_string(c.dir().join("containerd.log"))?;
    ensure!(
        log.contains("init pid is"),
        "no debug line of the container-creation helper in containerd's log with \
         RUST_LOG={HELPER_LOG_FILTER}"
    );
    // What /proc shows of the runtime process's environment is at most the spec's.
    for e in &environ {
        ensure!(
            env.contains(&e.as_str()),
            "/proc/<pid>/environ of the runtime process holds {e:?}, which is not in the spec's env {env:?}"
        );
    }
    Ok(err)
}

/// A spin-in-container image of tests/apps/spin-files whose component mounts `files`
/// (`files_toml`, a TOML array); `extra` adds entries to the rootfs.
fn spin_files_image(
    name: &str,
    files_toml: &str,
    extra: impl FnOnce(&mut TarTree) -> Result<()>,
) -> Result<oci_image_builder::Image> {
    let wasm = guest_apps_dir().join("spin_files.wasm");
    ensure!(
        wasm.is_file(),
        "{} is missing: run `make apps`",
        wasm.display()
    );
    let manifest = format!(
        r#"spin_manifest_version = 2

[application]
name = "escape-files"

[[trigger.http]]
route = "/..."
component = "files"

[component.files]
source = "files.wasm"
files = {files_toml}
"#
    );
    let mut t = TarTree::new();
    t.add_host_file(&wasm, "files.wasm")?;
    t.add_file("spin.toml", manifest.into_bytes(), 0o644)?;
    t.add_file(
        "assets/hello.txt",
        b"hello from the image\n".to_vec(),
        0o644,
    )?;
    extra(&mut t)?;
    rootfs_image(
        name,
        t,
        &ProcessConfig {
            cmd: vec!["/".into()],
            ..Default::default()
        },
    )
}

#[test]
fn spin_guest_files_cannot_reach_kernel_filesystems() {
    let Some(_s) = integration::root_test("spin_guest_files_cannot_reach_kernel_filesystems")
    else {
        return;
    };
    spin_files_escape().unwrap_or_else(|e| panic!("{e:#}"));
}

fn spin_files_escape() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let c = start_containerd()?;
    // A plain files mount: served, and the runtime process is confined.
    let plain = "docker.io/library/escape-files-plain:test";
    import(
        &c,
        dir.path(),
        &spin_files_image(
            plain,
            r#"[{ source = "assets", destination = "/data" }]"#,
            |_| Ok(()),
        )?,
    )?;
    {
        let app = run_logged(&c, dir.path(), plain, &[])
            .0
            .map_err(|(e, log)| anyhow::anyhow!("{e:#}\nthe app's log:\n{log}"))?;
        let (status, body) = app.get("/data/hello.txt")?;
        ensure!(
            status == 200 && body == "hello from the image\n",
            "GET /data/hello.txt: {status} {body:?}"
        );
        let pid = c.task_pid(&app.id).context("the Spin task is not listed")?;
        let threads = check_confined(pid)?;
        println!("spin runtime process: {threads} thread(s) confined");
        for e in proc_environ(pid)? {
            let name = e.split('=').next().unwrap_or_default();
            ensure!(
                !SHIM_VARS.contains(&name) && !e.contains(SECRET.1),
                "the Spin runtime's /proc/<pid>/environ holds {e}"
            );
        }
    }
    // The whole rootfs mounted at the guest's `/`, and a source that is a link to /proc:
    // each is refused before it serves, or serves without showing the kernel's files.
    let cases = [
        ("whole", r#"[{ source = ".", destination = "/" }]"#, "/"),
        (
            "link",
            r#"[{ source = "plink", destination = "/p" }]"#,
            "/p/",
        ),
    ];
    for (case, files, prefix) in cases {
        let name = format!("docker.io/library/escape-files-{case}:test");
        import(
            &c,
            dir.path(),
            &spin_files_image(&name, files, |t| t.add_symlink("plink", "/proc"))?,
        )?;
        match run_logged(&c, dir.path(), &name, &[]).0 {
            Err((e, log)) => {
                println!("files {case}: refused before serving: {}", log.trim());
                ensure!(
                    !log.is_empty() || format!("{e:#}").contains("files"),
                    "files {case}: the app stopped without saying why: {e:#}"
                );
            }
            Ok(app) => {
                let mut escapes = Vec::new();
                let proc_paths = ["self/environ", "1/environ", "self/mountinfo", "self/maps"];
                let mut paths: Vec<String> = proc_paths
                    .iter()
                    .map(|p| {
                        if case == "link" {
                            format!("{prefix}{p}")
                        } else {
                            format!("/proc/{p}")
                        }
                    })
                    .collect();
                paths.push(format!("/__list?dir={}", prefix.trim_end_matches('/')));
                if case == "whole" {
                    paths.extend(
                        [
                            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                            "/sys/kernel/uevent_seqnum",
                            "/dev/null",
                            "/__list?dir=/proc",
                            "/__list?dir=/dev",
                            "/__list?dir=/sys",
                        ]
                        .map(String::from),
                    );
                    let (status, body) = app.get("/assets/hello.txt")?;
                    ensure!(status == 200, "GET /assets/hello.txt: {status} {body:?}");
                }
                for path in &paths {
                    let (status, body) = app.get(path)?;
                    println!(
                        "files {case}: GET {path}: {status} {}",
                        body.lines().next().unwrap_or("")
                    );
                    if status == 200 {
                        escapes.push(format!(
                            "{path}: {}",
                            body.chars().take(120).collect::<String>()
                        ));
                    }
                }
                ensure!(
                    escapes.is_empty(),
                    "files {case}: the guest read kernel files: {escapes:#?}"
                );
            }
        }
    }
    Ok(())
}

/// What [`run_logged`] gives: the app, or why it did not run (the error and the app's log).
type Logged<'a> = std::result::Result<integration::SpinApp<'a>, (anyhow::Error, String)>;

/// `run_spin_app` of `image` with `extra` options and its output in a log file: the app (or
/// the failure and the log) and the log's path.
fn run_logged<'a>(
    c: &'a Containerd,
    dir: &Path,
    image: &str,
    extra: &[String],
) -> (Logged<'a>, std::path::PathBuf) {
    let log = dir.join(format!("{}.log", unique("app")));
    let mut args = extra.to_vec();
    args.extend(["--log-uri".to_string(), format!("file://{}", log.display())]);
    let r = c.run_spin_app(image, &args);
    let r = r.map_err(|e| (e, std::fs::read_to_string(&log).unwrap_or_default()));
    (r, log)
}

#[test]
fn greedy_spin_request_fails_alone_under_ctr_memory_limit() {
    let Some(_s) = integration::root_test("greedy_spin_request_fails_alone_under_ctr_memory_limit")
    else {
        return;
    };
    greedy_request().unwrap_or_else(|e| panic!("{e:#}"));
}

fn greedy_request() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let c = start_containerd()?;
    let name = "docker.io/library/spin-limits:escape";
    let tar = dir.path().join("limits.tar");
    oci_image_builder::spin::container_image(
        name,
        &workspace_root().join("tests/apps/spin-limits"),
        &[],
    )?
    .write_archive(&tar)?;
    c.import(&tar, false)?;
    let limit = ["--memory-limit".to_string(), (256u64 << 20).to_string()];
    let (app, log) = run_logged(&c, dir.path(), name, &limit);
    let app = app.map_err(|(e, log)| anyhow::anyhow!("{e:#}\nthe app's log:\n{log}"))?;
    let (status, body) = app.get("/")?;
    ensure!(status == 200 && body == "ok\n", "GET /: {status} {body:?}");
    for round in 0..2 {
        let r = integration::http_get(app.port, "/greedy");
        let running = c
            .task_list()?
            .iter()
            .any(|t| t.0 == app.id && t.2 == "RUNNING");
        ensure!(
            running,
            "round {round}: the container died on GET /greedy; its log:\n{}\nGET: {:#}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            r.err().map(|e| format!("{e:#}")).unwrap_or_default()
        );
        let (status, _) = r.context("GET /greedy got no answer")?;
        ensure!(
            status == 500,
            "round {round}: GET /greedy: {status}, want 500"
        );
        let (status, body) = app.get("/")?;
        ensure!(
            status == 200 && body == "ok\n",
            "GET / after /greedy: {status} {body:?}"
        );
    }
    let pid = c.task_pid(&app.id).context("task not listed")?;
    let memcg = integration::cgroups::proc_cgroups(pid)?
        .into_iter()
        .find(|l| l.controllers.split(',').any(|c| c == "memory"))
        .context("no memory cgroup (this test needs the cgroup v1 memory controller)")?;
    let oom = std::fs::read_to_string(
        Path::new("/sys/fs/cgroup/memory")
            .join(memcg.path.trim_start_matches('/'))
            .join("memory.oom_control"),
    )?;
    ensure!(
        oom.contains("oom_kill 0"),
        "the container's memcg saw OOM kills: {oom}"
    );
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    println!(
        "{}",
        log.lines()
            .filter(|l| l.contains("memory"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    ensure!(
        log.contains("each component instance may use up to 134217728 bytes"),
        "the runtime did not derive its per-instance cap from the 256 MiB limit: {log}"
    );
    Ok(())
}
