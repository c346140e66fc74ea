//! Compiling untrusted components is held by the pod's limits (issue 35, points 5 and 6),
//! tried through `ctr run --runtime io.containerd.spin.v2` on a private containerd 1.7:
//! - a component built to be costly to compile (generated here: one function whose loops
//!   keep thousands of locals live, which Cranelift's SSA construction and register
//!   allocator take minutes and gigabytes over) fails Create within the bounds, naming the
//!   limit it hit: the container's memory limit, the compile CPU-seconds, the wall-clock
//!   bound; the compiler ran unprivileged in the container's own cgroup (its memory is
//!   charged there), the shim's RSS stayed within 64 MiB of its idle figure, and nothing is
//!   left (no helper, no temporary file, no cache entry, no state, no cgroup);
//! - the same under a systemd-form cgroupsPath in a pod limited to 128 MiB: the compiler's
//!   memory is charged below the pod's cgroup and the error names the limit; on cgroup v2
//!   (simulated) each compiler gets a transient cgroup of its own below the pod's, removed
//!   with it;
//! - six components naming one large source: the shim reads it once;
//! - a text (non-Wasm) source gets a short error and no long line in containerd's log.
//!
//! Figures are printed. Run as root:
//! `cargo test --release --workspace --test compile_bounds -- --nocapture`.

use anyhow::{bail, ensure, Context, Result};
use integration::{wait_for, CgroupMode, Containerd, ContainerdConfig, ContainerdVersion};
use oci_image_builder::{hostile, rootfs_image, Blob, Image, ProcessConfig, TarTree};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shim's compile bounds in these tests: the wall-clock bound leaves the compiler a
/// third of a core to reach the CPU-seconds one, so the CPU case holds on a loaded machine.
const CPU_SECS: u64 = 20;
const TIMEOUT_SECS: u64 = 60;
/// How much the shim's RSS may grow over its idle figure while a component compiles.
const RSS_SLACK_KIB: u64 = 64 << 10;

/// A private containerd whose shims use test-private state and cache, and the compile
/// bounds above.
struct Node {
    c: Containerd,
    _dir: tempfile::TempDir,
    cache: PathBuf,
    state: PathBuf,
    images: PathBuf,
}

impl Node {
    fn start() -> Result<Node> {
        Node::start_in(CgroupMode::Host)
    }

    fn start_in(mode: CgroupMode) -> Result<Node> {
        integration::require_shim()?;
        let dir = tempfile::Builder::new()
            .prefix("cbounds-")
            .tempdir_in("/tmp")?;
        let cache = dir.path().join("cache");
        let state = dir.path().join("st");
        let images = dir.path().join("images");
        std::fs::create_dir_all(&state)?;
        std::fs::create_dir_all(&images)?;
        let env = vec![
            (
                "SPIN_SHIM_COMPILE_CACHE_DIR".into(),
                cache.display().to_string(),
            ),
            ("SPIN_SHIM_STATE_DIR".into(), state.display().to_string()),
            ("SPIN_SHIM_COMPILE_CPU_SECS".into(), CPU_SECS.to_string()),
            (
                "SPIN_SHIM_COMPILE_TIMEOUT_SECS".into(),
                TIMEOUT_SECS.to_string(),
            ),
        ];
        let c = Containerd::start_with(
            ContainerdVersion::V1_7,
            mode,
            &ContainerdConfig {
                env,
                ..Default::default()
            },
        )?;
        Ok(Node {
            c,
            _dir: dir,
            cache,
            state,
            images,
        })
    }

    fn import(&self, img: &Image) -> Result<()> {
        let tar = self
            .images
            .join(format!("{}.tar", img.name.replace(['/', ':'], "_")));
        img.write_archive(&tar)?;
        self.c.import(&tar, false)?;
        std::fs::remove_file(&tar)?;
        Ok(())
    }

    /// Runs `image` as a Spin app (`Containerd::run_spin_app`) with `extra` options,
    /// sampled while Create runs; a created app is removed again.
    fn attempt(&self, image: &str, extra: &[&str]) -> Result<Attempt> {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let t0 = Instant::now();
        let (run, samples) = sampled(&self.c, || self.c.run_spin_app(image, &extra));
        let elapsed = t0.elapsed();
        let error = run.err().map(|e| format!("{e:#}")).unwrap_or_default();
        // `ctr run`'s command line, quoted in the error, names the container's cgroup.
        let cgroup = error
            .split_whitespace()
            .skip_while(|w| *w != "--cgroup")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        Ok(Attempt {
            cgroup,
            created: error.is_empty(),
            error,
            elapsed,
            samples,
        })
    }

    /// Nothing of a failed Create is left: state, temporary or partial cache files, the
    /// container's cgroup (`/<root>/<id>`) and so any process in it.
    fn check_clean(&self, what: &str, cgroup: &str) -> Result<()> {
        let left = wait_for(Duration::from_secs(10), || {
            let n = std::fs::read_dir(&self.state).ok()?.count();
            (n == 0).then_some(())
        });
        ensure!(
            left.is_some(),
            "{what}: the shim left state in {}: {:?}",
            self.state.display(),
            integration::dir_entries(&self.state)
        );
        let tmp: Vec<String> = integration::dir_entries(&self.cache)
            .into_iter()
            .filter(|n| n.starts_with(".tmp"))
            .collect();
        ensure!(
            tmp.is_empty(),
            "{what}: temporary files left in the cache: {tmp:?}"
        );
        // No process (a compile helper or anything it started) can outlive the container's
        // cgroup: it is removed only once empty.
        let left = integration::cgroups::cgroup_exists(cgroup);
        ensure!(
            left.is_empty(),
            "{what}: the container's cgroup is left: {left:?}"
        );
        Ok(())
    }

    /// The cache's entries (`*.cwasm`).
    fn entries(&self) -> Vec<String> {
        integration::dir_entries(&self.cache)
            .into_iter()
            .filter(|n| n.ends_with(".cwasm"))
            .collect()
    }
}

/// What one `ctr run` did.
struct Attempt {
    /// The container's cgroup (below each hierarchy root) when Create failed.
    cgroup: String,
    created: bool,
    error: String,
    elapsed: Duration,
    samples: Samples,
}

impl Attempt {
    /// The shim's message in `ctr run`'s error (after containerd's prefixes).
    fn shim_error(&self) -> &str {
        let line = self.error.lines().next().unwrap_or_default();
        line.rsplit_once("compiling the Spin app: ")
            .map_or(line, |(_, m)| m)
    }
}

/// What a [`Sampler`] saw.
#[derive(Debug, Default, Clone)]
struct Samples {
    /// Peak VmHWM of the shim server processes (KiB).
    shim_hwm_kib: u64,
    /// VmRSS of the shim when first seen (KiB).
    shim_first_rss_kib: u64,
    /// Largest `rchar` of a shim server process (bytes read by it and by the helpers it
    /// reaped).
    shim_rchar: u64,
    /// Largest sum of `rchar` over a shim server's threads (bytes the shim read itself).
    shim_own_rchar: u64,
    /// Peak VmHWM of the compile helpers (KiB).
    helper_hwm_kib: u64,
    /// Memory cgroups the helpers ran in, with their uid.
    helper_cgroups: Vec<(String, u32)>,
    /// Unified-hierarchy cgroups the helpers ran in.
    helper_unified: Vec<String>,
    /// `memory.max_usage_in_bytes` of the container's memory cgroup.
    cgroup_max_usage: u64,
}

/// Runs `f` while sampling, every 20 ms, this containerd's shims, the compile helpers they
/// started and the memory cgroup those run in.
fn sampled<T>(c: &Containerd, f: impl FnOnce() -> T) -> (T, Samples) {
    let done = AtomicBool::new(false);
    let samples = Mutex::new(Samples::default());
    let out = std::thread::scope(|scope| {
        scope.spawn(|| {
            // Bounded: at most 10 minutes of 20 ms samples.
            for _ in 0..30_000 {
                sample(c, &mut samples.lock().unwrap());
                if done.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let out = f();
        done.store(true, Ordering::Relaxed);
        out
    });
    (out, samples.into_inner().unwrap())
}

fn sample(c: &Containerd, o: &mut Samples) {
    let shims = c.shim_pids();
    for &pid in &shims {
        if o.shim_first_rss_kib == 0 {
            o.shim_first_rss_kib = status_num(pid, "VmRSS:").unwrap_or(0);
        }
        o.shim_hwm_kib = o.shim_hwm_kib.max(status_num(pid, "VmHWM:").unwrap_or(0));
        o.shim_rchar = o.shim_rchar.max(rchar(pid).unwrap_or(0));
        o.shim_own_rchar = o.shim_own_rchar.max(threads_rchar(pid));
    }
    for pid in helper_pids_of(&shims) {
        o.helper_hwm_kib = o.helper_hwm_kib.max(status_num(pid, "VmHWM:").unwrap_or(0));
        let uid = status_num(pid, "Uid:").unwrap_or(u64::MAX) as u32;
        let memcg = memory_cgroup(pid);
        let unified = integration::cgroups::proc_cgroups(pid)
            .ok()
            .and_then(|l| l.into_iter().find(|l| l.id == 0).map(|l| l.path));
        // A helper that has exited shows the root cgroup until it is reaped: what was read
        // counts only if it still ran afterwards.
        if exited(pid) {
            continue;
        }
        if let Some(u) = unified.filter(|u| !o.helper_unified.contains(u)) {
            o.helper_unified.push(u);
        }
        let Some(path) = memcg else {
            continue;
        };
        let usage = Path::new("/sys/fs/cgroup/memory")
            .join(path.trim_start_matches('/'))
            .join("memory.max_usage_in_bytes");
        if let Some(u) = std::fs::read_to_string(usage)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            o.cgroup_max_usage = o.cgroup_max_usage.max(u);
        }
        if !o.helper_cgroups.contains(&(path.clone(), uid)) {
            o.helper_cgroups.push((path, uid));
        }
    }
}

/// The first number after `key` in `/proc/<pid>/status` (KiB for `Vm*`).
fn status_num(pid: i32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Bytes `pid` read through read(2) and friends (`rchar` of `/proc/<pid>/io`: its threads,
/// those that exited, and the children it reaped).
fn rchar(pid: i32) -> Option<u64> {
    io_rchar(&format!("/proc/{pid}/io"))
}

/// Bytes the running threads of `pid` read themselves.
fn threads_rchar(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| io_rchar(&t.path().join("io").to_string_lossy()))
        .sum()
}

fn io_rchar(file: &str) -> Option<u64> {
    let s = std::fs::read_to_string(file).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("rchar: "))?
        .trim()
        .parse()
        .ok()
}

/// Compile helpers (`<shim> --compile-helper`) started by one of `shims`: the
/// supervisor is a shim's child, its worker the supervisor's.
fn helper_pids_of(shims: &[i32]) -> Vec<i32> {
    let helper =
        |p: &i32| integration::cmdline(*p).get(1).map(String::as_str) == Some("--compile-helper");
    let supervisors: Vec<i32> = shims
        .iter()
        .flat_map(|s| integration::children(*s))
        .filter(helper)
        .collect();
    let workers: Vec<i32> = supervisors
        .iter()
        .flat_map(|s| integration::children(*s))
        .filter(helper)
        .collect();
    supervisors.into_iter().chain(workers).collect()
}

/// Whether `pid` has exited or is exiting (gone, or `PF_EXITING` in its flags: set when
/// `exit` begins, before the kernel moves it to the root cgroup and well before it is a
/// zombie).
fn exited(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // Fields after the command's closing parenthesis: state, ppid, pgrp, session, tty_nr,
    // tpgid, flags.
    let flags = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(6)?.parse::<u64>().ok());
    flags.is_none_or(|f| f & PF_EXITING != 0)
}

/// The memory cgroup of `pid`.
fn memory_cgroup(pid: i32) -> Option<String> {
    integration::cgroups::proc_cgroups(pid)
        .ok()?
        .into_iter()
        .find(|l| l.controllers.split(',').any(|c| c == "memory"))
        .map(|l| l.path)
}

fn leb(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    leb(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// A component whose one core function nests `loops` loops around a body that adds 1 to
/// each of `locals` i32 locals: every local is live and changed across every loop, so
/// Cranelift builds `loops x locals` block parameters and its register allocator works
/// through all of them (a few dozen KiB of Wasm, minutes of CPU and gigabytes).
fn costly_component(loops: usize, locals: u64) -> Vec<u8> {
    let mut body = Vec::new();
    body.push(1); // one local declaration
    leb(locals, &mut body);
    body.push(0x7f); // i32
    for _ in 0..loops {
        body.extend_from_slice(&[0x03, 0x40]); // loop (empty block type)
    }
    for l in 0..locals {
        body.push(0x20); // local.get l
        leb(l, &mut body);
        body.extend_from_slice(&[0x41, 0x01, 0x6a, 0x21]); // i32.const 1; i32.add; local.set
        leb(l, &mut body);
    }
    for _ in 0..loops {
        body.extend_from_slice(&[0x20, 0x00, 0x0d, 0x00, 0x0b]); // local.get 0; br_if 0; end
    }
    body.push(0x0b); // end of the function
    let mut code = vec![1]; // one function body
    leb(body.len() as u64, &mut code);
    code.extend_from_slice(&body);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut module); // type () -> ()
    section(3, &[1, 0], &mut module); // one function of type 0
    section(10, &code, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component); // a core module section
    component
}

/// A spin-in-container image: `/spin.toml` naming `sources` (component id, path), the
/// `files` (path, bytes) in a gzipped rootfs layer.
fn spin_image(name: &str, sources: &[(&str, &str)], files: Vec<(&str, Vec<u8>)>) -> Result<Image> {
    let mut manifest =
        String::from("spin_manifest_version = 2\n[application]\nname = \"bounds\"\n");
    for (id, source) in sources {
        manifest.push_str(&format!(
            "[[trigger.http]]\nroute = \"/{id}/...\"\ncomponent = \"{id}\"\n\
             [component.{id}]\nsource = \"{source}\"\n"
        ));
    }
    let mut tree = TarTree::new();
    tree.add_file("spin.toml", manifest.into_bytes(), 0o644)?;
    for (path, data) in files {
        tree.add_file(path, data, 0o644)?;
    }
    let mut img = rootfs_image(
        name,
        tree,
        &ProcessConfig {
            cmd: vec!["/".into()],
            ..Default::default()
        },
    )?;
    // The config's diff id is the plain tar's; the layer travels gzipped.
    let tar = std::mem::take(&mut img.layers[0].data);
    img.layers[0] = Blob::new(
        "application/vnd.oci.image.layer.v1.tar+gzip",
        hostile::gzip(&tar)?,
    );
    Ok(img)
}

/// The shim's idle RSS: a hello app's shim once its container runs (KiB).
fn idle_shim_rss(n: &Node) -> Result<u64> {
    let hello = integration::guest_apps_dir().join("spin_hello.wasm");
    ensure!(
        hello.is_file(),
        "{} is missing: run make apps",
        hello.display()
    );
    let img = spin_image(
        "docker.io/library/cbounds-hello:1",
        &[("hello", "hello.wasm")],
        vec![("hello.wasm", std::fs::read(&hello)?)],
    )?;
    n.import(&img)?;
    let app = n.c.run_spin_app(&img.name, &[])?;
    let (st, _) = app.get("/hello")?;
    ensure!(st == 200, "hello answered {st}");
    let rss =
        n.c.shim_pids()
            .into_iter()
            .filter_map(|p| status_num(p, "VmRSS:"))
            .max()
            .context("no shim process")?;
    drop(app);
    Ok(rss)
}

#[test]
fn a_costly_component_fails_create_within_the_pods_limits() {
    let Some(_s) = integration::root_test("a_costly_component_fails_create_within_the_pods_limits")
    else {
        return;
    };
    let r = (|| -> Result<()> {
        let n = Node::start()?;
        let idle = idle_shim_rss(&n)?;
        println!("shim idle RSS: {idle} KiB");
        let (img, hex) = import_costly(&n)?;
        let cases: [(&str, Vec<&str>, &[&str]); 3] = [
            (
                "memory limit (128 MiB)",
                vec!["--memory-limit", "134217728"],
                &[
                    "component `costly`",
                    "memory limit of 128 MiB",
                    "raise the container",
                ],
            ),
            (
                "compile CPU-seconds",
                vec!["--memory-limit", "8589934592"],
                &[
                    "component `costly`",
                    "CPU-seconds",
                    "SPIN_SHIM_COMPILE_CPU_SECS",
                ],
            ),
            (
                "wall-clock bound (0.1 CPU)",
                vec!["--memory-limit", "8589934592", "--cpus", "0.1"],
                &[
                    "component `costly`",
                    "SPIN_SHIM_COMPILE_TIMEOUT_SECS",
                    "more CPU",
                ],
            ),
        ];
        let mut failures = Vec::new();
        for (what, extra, wants) in cases {
            let a = n.attempt(&img.name, &extra)?;
            let s = &a.samples;
            println!(
                "{what}: created={} after {:.1} s; shim peak RSS {} KiB (first seen {} KiB); \
                 helper peak RSS {} KiB in {:?}; container memory cgroup peak {} KiB\n  error: {}",
                a.created,
                a.elapsed.as_secs_f64(),
                s.shim_hwm_kib,
                s.shim_first_rss_kib,
                s.helper_hwm_kib,
                s.helper_cgroups,
                s.cgroup_max_usage >> 10,
                a.shim_error()
            );
            let check = || -> Result<()> {
                ensure!(!a.created, "the costly component was created");
                for w in wants {
                    ensure!(
                        a.error.contains(w),
                        "the error does not name {w:?}: {}",
                        a.error
                    );
                }
                ensure!(
                    a.elapsed < Duration::from_secs(TIMEOUT_SECS + 60),
                    "Create took {:?}, past the {TIMEOUT_SECS} s bound",
                    a.elapsed
                );
                ensure!(
                    s.shim_hwm_kib <= idle + RSS_SLACK_KIB,
                    "the shim's RSS reached {} KiB, idle {idle} KiB",
                    s.shim_hwm_kib
                );
                // Seen as uid 0 only in the moment between exec and dropping privileges.
                ensure!(
                    s.helper_cgroups.iter().any(|(_, uid)| *uid == 65534)
                        && s.helper_cgroups.iter().all(|(p, _)| *p == a.cgroup),
                    "compile helpers ran in {:?} (memory cgroup, uid), not as 65534 in the \
                     container's cgroup {}",
                    s.helper_cgroups,
                    a.cgroup
                );
                ensure!(
                    s.cgroup_max_usage > 32 << 20,
                    "the compilation's memory did not show in the container's cgroup ({} \
                     bytes)",
                    s.cgroup_max_usage
                );
                n.check_clean(what, &a.cgroup)?;
                let costly: Vec<String> = n
                    .entries()
                    .into_iter()
                    .filter(|e| e.starts_with(&hex))
                    .collect();
                ensure!(
                    costly.is_empty(),
                    "cache entries of the component: {costly:?}"
                );
                Ok(())
            };
            if let Err(e) = check() {
                failures.push(format!("{what}: {e:#}"));
            }
        }
        if !failures.is_empty() {
            bail!("{}", failures.join("\n"));
        }
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn one_source_named_by_six_components_is_read_once() {
    let Some(_s) = integration::root_test("one_source_named_by_six_components_is_read_once") else {
        return;
    };
    let r = (|| -> Result<()> {
        let n = Node::start()?;
        let idle = idle_shim_rss(&n)?;
        // A Wasm preamble, then 256 MiB the compiler refuses (not a valid section).
        const SIZE: usize = 256 << 20;
        let mut big = b"\0asm\x0d\0\x01\0".to_vec();
        big.resize(SIZE, 0);
        let ids = ["a", "b", "c", "d", "e", "f"];
        let paths = [
            "big.wasm",
            "./big.wasm",
            "/big.wasm",
            "x/../big.wasm",
            "big.wasm",
            "big.wasm",
        ];
        let sources: Vec<(&str, &str)> = ids.iter().copied().zip(paths).collect();
        let img = spin_image(
            "docker.io/library/cbounds-six:1",
            &sources,
            vec![("big.wasm", big), ("x/.keep", Vec::new())],
        )?;
        drop(sources);
        n.import(&img)?;
        let a = n.attempt(&img.name, &[])?;
        let s = &a.samples;
        println!(
            "six components, one {} MiB source: created={} after {:.1} s; the shim read {} MiB \
             itself, {} MiB with its reaped helpers (rchar), peak RSS {} KiB (idle {idle} KiB)\n  \
             error ({} bytes): {}",
            SIZE >> 20,
            a.created,
            a.elapsed.as_secs_f64(),
            s.shim_own_rchar >> 20,
            s.shim_rchar >> 20,
            s.shim_hwm_kib,
            a.shim_error().len(),
            a.shim_error()
        );
        ensure!(!a.created, "an invalid component was created");
        // The shim's own threads read it once; the helpers it reaped (Winch first, then
        // Cranelift, both refusing it) read it in the container's cgroup.
        ensure!(
            s.shim_own_rchar < (SIZE as u64) * 3 / 2,
            "the shim read {} bytes for one source of {SIZE}",
            s.shim_own_rchar
        );
        ensure!(
            s.shim_hwm_kib <= idle + RSS_SLACK_KIB,
            "the shim's RSS reached {} KiB, idle {idle} KiB",
            s.shim_hwm_kib
        );
        ensure!(
            a.shim_error().len() < 1024,
            "the error is {} bytes",
            a.shim_error().len()
        );
        n.check_clean("six components", &a.cgroup)?;
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn a_text_source_gets_a_short_error_and_no_long_log_line() {
    let Some(_s) = integration::root_test("a_text_source_gets_a_short_error_and_no_long_log_line")
    else {
        return;
    };
    let r = (|| -> Result<()> {
        let n = Node::start()?;
        // 64 MiB of the text format calling a function by a name nobody defines: wasmtime's
        // text fallback parses it and quotes the name in its error.
        let mut text = b"(component (core module (func (call $".to_vec();
        while text.len() < 64 << 20 {
            text.extend_from_slice(b"UNTRUSTED-TEXT-MARKER-");
        }
        text.extend_from_slice(b"))))\n");
        let img = spin_image(
            "docker.io/library/cbounds-text:1",
            &[("text", "app.wat")],
            vec![("app.wat", text)],
        )?;
        n.import(&img)?;
        let a = n.attempt(&img.name, &[])?;
        let longest = std::fs::read_to_string(n.c.dir().join("containerd.log"))?
            .lines()
            .map(str::len)
            .max()
            .unwrap_or(0);
        println!(
            "text source: created={} after {:.1} s; error {} bytes; longest containerd log \
             line {longest} bytes; shim read {} KiB\n  error: {}",
            a.created,
            a.elapsed.as_secs_f64(),
            a.shim_error().len(),
            a.samples.shim_rchar >> 10,
            a.shim_error()
        );
        ensure!(!a.created, "a text source was created");
        ensure!(
            a.error.contains("not a Wasm binary") && a.error.contains("app.wat"),
            "{}",
            a.error
        );
        ensure!(
            !a.error.contains("UNTRUSTED-TEXT-MARKER"),
            "the error quotes the source"
        );
        ensure!(
            a.shim_error().len() < 1024,
            "the error is {} bytes",
            a.shim_error().len()
        );
        ensure!(
            longest < 4096,
            "containerd's log has a line of {longest} bytes"
        );
        n.check_clean("text source", &a.cgroup)?;
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

/// The cgroup kubelet's systemd driver gives pod `uid` (below each hierarchy root), and the
/// cgroupsPath of container `name` in it, in the systemd form.
fn systemd_pod(uid: &str, name: &str) -> (String, String) {
    (
        format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice"),
        format!("kubepods-burstable-pod{uid}.slice:cri-containerd:{name}"),
    )
}

/// A new pod's cgroup (below each hierarchy root; removed with the guard) and a container
/// in it: (pod cgroup, container name, its systemd-form cgroupsPath, guard).
fn fresh_pod() -> (String, String, String, integration::cgroups::CgroupGuard) {
    let (uid, name) = (integration::unique("cb"), integration::unique("c"));
    let (pod, path) = systemd_pod(&uid, &name);
    let guard = integration::cgroups::CgroupGuard::new(&pod);
    (pod, name, path, guard)
}

/// The costly component's image, imported into `n`, and the component's sha256 (hex).
fn import_costly(n: &Node) -> Result<(Image, String)> {
    let wasm = costly_component(80, 12_000);
    let digest = oci_image_builder::sha256_digest(&wasm);
    let hex = digest.trim_start_matches("sha256:").to_string();
    println!("costly component: {} bytes", wasm.len());
    let img = spin_image(
        "docker.io/library/cbounds-costly:1",
        &[("costly", "costly.wasm")],
        vec![("costly.wasm", wasm)],
    )?;
    n.import(&img)?;
    Ok((img, hex))
}

/// A container with a systemd-form cgroupsPath (`<pod slice>:cri-containerd:<name>`, as
/// kubelet's systemd driver gives) in a pod whose cgroup is limited to 128 MiB: the
/// compiler's memory is charged below the pod's cgroup, Create fails naming the limit, and
/// nothing is left. (On this cgroup v1 host the systemd form is placed by the cgroupfs
/// driver at systemd's path, which is where kubelet's pod cgroup is.)
#[test]
fn with_a_systemd_cgroups_path_the_compiler_is_held_by_the_pods_limit() {
    let Some(_s) = integration::root_test(
        "with_a_systemd_cgroups_path_the_compiler_is_held_by_the_pods_limit",
    ) else {
        return;
    };
    let r = (|| -> Result<()> {
        let (pod, name, path, _pod) = fresh_pod();
        let memory = integration::cgroups::v1_hierarchy("memory")
            .context("no v1 memory hierarchy on this host")?;
        std::fs::create_dir_all(memory.join(&pod))?;
        std::fs::write(
            memory.join(&pod).join("memory.limit_in_bytes"),
            (128u64 << 20).to_string(),
        )?;
        let n = Node::start()?;
        let (img, _) = import_costly(&n)?;
        let a = n.attempt(
            &img.name,
            &["--memory-limit", "134217728", "--cgroup", &path],
        )?;
        let s = &a.samples;
        println!(
            "systemd-form cgroupsPath, pod limited to 128 MiB: created={} after {:.1} s; helper \
             peak RSS {} KiB in {:?}; container memory cgroup peak {} KiB\n  error: {}",
            a.created,
            a.elapsed.as_secs_f64(),
            s.helper_hwm_kib,
            s.helper_cgroups,
            s.cgroup_max_usage >> 10,
            a.shim_error()
        );
        ensure!(!a.created, "the costly component was created");
        for w in ["component `costly`", "memory limit of 128 MiB"] {
            ensure!(
                a.error.contains(w),
                "the error does not name {w:?}: {}",
                a.error
            );
        }
        let below = format!("/{pod}/");
        ensure!(
            s.helper_cgroups.iter().any(|(_, uid)| *uid == 65534)
                && s.helper_cgroups.iter().all(|(p, _)| p.starts_with(&below)),
            "compile helpers ran in {:?} (memory cgroup, uid), not as 65534 below the pod's \
             cgroup {below}",
            s.helper_cgroups
        );
        ensure!(
            s.cgroup_max_usage > 32 << 20,
            "the compilation's memory did not show below the pod's cgroup ({} bytes)",
            s.cgroup_max_usage
        );
        n.check_clean(
            "systemd-form cgroupsPath",
            &format!("{pod}/cri-containerd-{name}.scope"),
        )?;
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

/// On a cgroup v2 host (simulated: the unified hierarchy in a private mount namespace)
/// each compile helper runs in a transient cgroup of its own next to the container's, below
/// the pod's (`cri-containerd-<name>.compile-<n>`): there the systemd driver's scope
/// does not exist during Create, and kubelet's `memory.oom.group = 1` on the container's
/// cgroup would make a helper's OOM kill the serving container. The helper's cgroup is
/// removed with it. (This simulated host has no memory controller: the CPU-seconds or the
/// wall-clock bound ends the compile.)
#[test]
fn on_cgroup_v2_each_compiler_gets_a_transient_cgroup_below_the_pod() {
    let Some(_s) =
        integration::root_test("on_cgroup_v2_each_compiler_gets_a_transient_cgroup_below_the_pod")
    else {
        return;
    };
    let r = (|| -> Result<()> {
        let (pod, name, path, _pod) = fresh_pod();
        let n = Node::start_in(CgroupMode::UnifiedNamespace)?;
        let (img, _) = import_costly(&n)?;
        let a = n.attempt(
            &img.name,
            &["--memory-limit", "8589934592", "--cgroup", &path],
        )?;
        let s = &a.samples;
        println!(
            "cgroup v2, systemd-form cgroupsPath: created={} after {:.1} s; helpers in {:?}\n  \
             error: {}",
            a.created,
            a.elapsed.as_secs_f64(),
            s.helper_unified,
            a.shim_error()
        );
        ensure!(!a.created, "the costly component was created");
        // Which bound comes first depends on the machine's load.
        ensure!(
            a.error.contains("component `costly`")
                && (a.error.contains("CPU-seconds")
                    || a.error.contains("SPIN_SHIM_COMPILE_TIMEOUT_SECS")),
            "{}",
            a.error
        );
        let leaf = format!("/{pod}/cri-containerd-{name}.compile-");
        ensure!(
            !s.helper_unified.is_empty() && s.helper_unified.iter().all(|p| p.starts_with(&leaf)),
            "compile helpers ran in {:?}, not in {leaf}<n>",
            s.helper_unified
        );
        let unified = Path::new("/sys/fs/cgroup/unified").join(&pod);
        let left: Vec<String> = integration::dir_entries(&unified)
            .into_iter()
            .filter(|e| e.contains(".compile-"))
            .collect();
        ensure!(left.is_empty(), "helper cgroups left: {left:?}");
        n.check_clean(
            "cgroup v2, systemd-form cgroupsPath",
            &format!("{pod}/cri-containerd-{name}.scope"),
        )?;
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

/// Whether `pid` runs at nice 10: the background (tier-up) compile helpers, not Create's.
fn at_background_priority(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Field 19 (nice), counted after the parenthesised command name.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(16)?.parse::<i64>().ok())
        == Some(10)
}

/// On a cgroup v2 host (simulated) a background (tier-up) compile helper runs in a
/// transient cgroup of its own, which the container's removal does not empty: the shim
/// kills it once the container's cgroup is gone, within about a second. The costly
/// component starts on Winch's code (tiering from its first byte), so its Cranelift
/// compilation is the background one, which runs for many seconds; the container is
/// removed while it runs, and the time from the container's cgroup disappearing to the
/// helper's end is printed and must stay within a few seconds.
#[test]
fn a_background_compiler_is_killed_once_the_containers_cgroup_is_removed() {
    let Some(_s) = integration::root_test(
        "a_background_compiler_is_killed_once_the_containers_cgroup_is_removed",
    ) else {
        return;
    };
    let r = (|| -> Result<()> {
        let (pod, name, path, _pod) = fresh_pod();
        let n = Node::start_in(CgroupMode::UnifiedNamespace)?;
        let (img, _) = import_costly(&n)?;
        let id = integration::unique("bg");
        let runtime = integration::test_runtime();
        // The costly component has no HTTP export: the app stops at start, after Create
        // (and the background compilation it starts); the container stays until removed.
        n.c.ctr_ok(&[
            "run",
            "-d",
            "--net-host",
            "--runtime",
            &runtime,
            "--memory-limit",
            "8589934592",
            "--cgroup",
            &path,
            "--env",
            "SPIN_SHIM_TIERED_COMPILE_MIN_BYTES=1",
            &img.name,
            &id,
            "/",
        ])?;
        let scope = Path::new("/sys/fs/cgroup/unified")
            .join(&pod)
            .join(format!("cri-containerd-{name}.scope"));
        let background = || -> Vec<i32> {
            helper_pids_of(&n.c.shim_pids())
                .into_iter()
                .filter(|p| !exited(*p) && at_background_priority(*p))
                .collect()
        };
        let seen = wait_for(Duration::from_secs(60), || {
            let b = background();
            (!b.is_empty() && scope.is_dir()).then_some(b)
        });
        let Some(helpers) = seen else {
            n.c.force_remove(&id);
            bail!(
                "no background compile helper ran beside the container's cgroup {} within 60 s; \
                 containerd's log:\n{}",
                scope.display(),
                n.c.log_tail(20)
            );
        };
        let cgroups: Vec<String> = helpers
            .iter()
            .filter_map(|p| integration::cgroups::proc_cgroups(*p).ok())
            .flat_map(|l| l.into_iter().filter(|l| l.id == 0).map(|l| l.path))
            .collect();
        // Removed as kubelet removes a container; the cgroup's end and the helper's are
        // watched while it happens (bounded: 60 s of 10 ms polls).
        let (gone_at, helper_end) = std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                let (mut gone_at, mut helper_end) = (None, None);
                for _ in 0..6000 {
                    let now = Instant::now();
                    if gone_at.is_none() && !scope.is_dir() {
                        gone_at = Some(now);
                    }
                    if helper_end.is_none() && helpers.iter().all(|p| exited(*p)) {
                        helper_end = Some(now);
                    }
                    if gone_at.is_some() && helper_end.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                (gone_at, helper_end)
            });
            n.c.force_remove(&id);
            watcher.join().expect("watcher")
        });
        let gone_at = gone_at.context("the container's cgroup was not removed within 60 s")?;
        let helper_end = helper_end.with_context(|| {
            format!("the background compile helpers {helpers:?} still run 60 s after removal")
        })?;
        let after = helper_end.saturating_duration_since(gone_at);
        println!(
            "background compile helper {helpers:?} in {cgroups:?}: ended {} ms after the \
             container's cgroup was removed",
            after.as_millis()
        );
        ensure!(
            cgroups.iter().all(|c| c.contains(".compile-")),
            "the background helper ran in {cgroups:?}, not in a transient cgroup of its own"
        );
        // The shim checks once a second; the rest is slack for a loaded machine.
        ensure!(
            after <= Duration::from_secs(3),
            "the background compile helper ended {} ms after the container's cgroup was removed",
            after.as_millis()
        );
        let unified = Path::new("/sys/fs/cgroup/unified").join(&pod);
        let left: Vec<String> = integration::dir_entries(&unified)
            .into_iter()
            .filter(|e| e.contains(".compile-"))
            .collect();
        ensure!(left.is_empty(), "helper cgroups left: {left:?}");
        Ok(())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}
