//! `doctor`: inspects a node and says, check by check with a verdict, whether the shim's
//! pods will be placed under their pod cgroups and measured right.
//!
//! What it looks at, as the running containerd sees it (its mount namespace, its
//! environment, its config) when a containerd process is found:
//! - the cgroup layout (v1, hybrid, v2) and the cpu and memory controllers pod metrics need;
//! - whether systemd is PID 1, and its version;
//! - containerd's version, and whether the runtime is registered in its effective config
//!   (`containerd config dump`), under which handler names, with or without an `options`
//!   table (`SystemdCgroup`);
//! - the kubelet's cgroup driver (command line or config file) against the node;
//! - the shim binary where containerd looks for it (`runtime_path`, containerd's `PATH`,
//!   the directory of the containerd binary);
//! - the shim's settings in containerd's environment (which the shim inherits), checked as
//!   the shim checks them at start;
//! - the compiled-component cache's owner and mode;
//! - device-rule enforcement on cgroup v2.
//!
//! [`Report::exit_code`] is 0 only when no check failed.

#![warn(missing_docs)]

pub mod cli;

use std::path::{Path, PathBuf};
use std::process::Command;

use cgroup_placement::{CgroupLayout, Host, CGROUP_ROOT};
use serde::{Deserialize, Serialize};

/// What the shim being checked is called and expects (JSON: how the shim hands it to
/// `spin-shim-doctor` for `doctor --run`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    /// containerd runtime type (`io.containerd.spin.v2`).
    pub runtime_type: String,
    /// The shim binary containerd looks up for that runtime type.
    pub shim_binary: String,
    /// The CRI handler RuntimeClasses use (`spin`).
    pub handler: String,
    /// Env var (containerd's environment, inherited by the shim) naming the compile cache.
    pub cache_dir_env: String,
    /// The compile cache's default directory.
    pub cache_default: PathBuf,
}

/// Where to look; everything defaults to what the running containerd uses.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// containerd config file (default: the running containerd's `--config`, else
    /// `/etc/containerd/config.toml`).
    pub config: Option<PathBuf>,
    /// containerd binary (default: the running containerd's, else `containerd` on PATH).
    pub containerd: Option<PathBuf>,
    /// kubelet config file (default: the running kubelet's `--config`, else
    /// `/var/lib/kubelet/config.yaml`).
    pub kubelet_config: Option<PathBuf>,
}

/// A check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Right.
    Ok,
    /// A fact, neither right nor wrong.
    Info,
    /// Works, with a caveat.
    Warn,
    /// Pods will fail, or be placed or measured wrong.
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Short name (`cgroups`, `containerd`, `runtime`, ...).
    pub check: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do about a warning or failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Every check, in order.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
    /// What the checks found out about the node, for `doctor --run`'s test pod.
    #[serde(skip)]
    pub facts: Facts,
}

/// Facts about the node gathered by [`inspect`].
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The running containerd's pid, if one was found.
    pub containerd_pid: Option<i32>,
    /// Its mount namespace's root (`/proc/<pid>/root`), else `/`.
    pub ns_root: PathBuf,
    /// The mountinfo text of containerd's mount namespace.
    pub mountinfo: String,
    /// Whether the cgroup root there is cgroup2.
    pub unified: bool,
    /// The containerd binary.
    pub containerd_bin: Option<PathBuf>,
    /// The CRI (gRPC) socket, as containerd names it (in its mount namespace).
    pub cri_socket: Option<PathBuf>,
    /// kubelet's cgroup driver if found; else runc's `SystemdCgroup` decides.
    pub kubelet_driver: Option<String>,
    /// runc's `SystemdCgroup` in containerd's config.
    pub runc_systemd: Option<bool>,
    /// Whether PID 1 is systemd.
    pub systemd_pid1: bool,
}

impl Report {
    /// 0 when no check failed, else 1.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.checks.iter().any(|c| c.verdict == Verdict::Fail))
    }

    /// The check named `name`.
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.check == name)
    }

    /// One line per check, then the overall verdict.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let v = match c.verdict {
                Verdict::Ok => "ok",
                Verdict::Info => "info",
                Verdict::Warn => "WARN",
                Verdict::Fail => "FAIL",
            };
            out.push_str(&format!("{v:<5} {:<13} {}\n", c.check, c.detail));
            if let Some(fix) = &c.fix {
                out.push_str(&format!("{:<19} fix: {fix}\n", ""));
            }
        }
        let failed = self
            .checks
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .count();
        if failed == 0 {
            out.push_str("verdict: pods on this node will be placed under their pod cgroups and measured right\n");
        } else {
            out.push_str(&format!(
                "verdict: {failed} check(s) failed; pods will fail or be misplaced or mismeasured until fixed\n"
            ));
        }
        out
    }

    /// The report as JSON (`{"checks": [...], "ok": bool}`).
    pub fn json(&self) -> String {
        serde_json::json!({ "checks": self.checks, "ok": self.exit_code() == 0 }).to_string()
    }
}

/// A process as `/proc` shows it.
#[derive(Debug, Clone)]
struct Proc {
    pid: i32,
    exe: Option<PathBuf>,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Proc {
    fn read(pid: i32) -> Option<Proc> {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let split = |b: Vec<u8>| -> Vec<String> {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        };
        let args = split(std::fs::read(dir.join("cmdline")).ok()?);
        let env = split(std::fs::read(dir.join("environ")).unwrap_or_default())
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.into(), v.into())))
            .collect();
        Some(Proc {
            pid,
            exe: std::fs::read_link(dir.join("exe")).ok(),
            args,
            env,
        })
    }

    fn env(&self, key: &str) -> Option<&str> {
        spin_shim_settings::lookup(&self.env, key)
    }

    /// The value of flag `long` (`--x V`, `--x=V`, or `short V`).
    fn flag(&self, long: &str, short: Option<&str>) -> Option<String> {
        let mut it = self.args.iter().skip(1);
        while let Some(a) = it.next() {
            if a == long || Some(a.as_str()) == short {
                return it.next().cloned();
            }
            if let Some(v) = a.strip_prefix(&format!("{long}=")) {
                return Some(v.to_string());
            }
        }
        None
    }
}

/// Processes whose `comm` is exactly `name`.
fn processes_named(name: &str) -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            if let Some(p) = Proc::read(pid) {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

const DEFAULT_CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
const DEFAULT_KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
const DEFAULT_CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The containerd process that uses `config` (or, without one, the default config).
fn find_containerd(config: Option<&Path>) -> Option<Proc> {
    let all = processes_named("containerd");
    let cfg_of = |p: &Proc| {
        p.flag("--config", Some("-c"))
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTAINERD_CONFIG))
    };
    match config {
        Some(c) => all.into_iter().find(|p| same_file(&cfg_of(p), c)),
        None => {
            let default = Path::new(DEFAULT_CONTAINERD_CONFIG);
            let pick = all.iter().position(|p| same_file(&cfg_of(p), default));
            match pick {
                Some(i) => all.into_iter().nth(i),
                None => all.into_iter().next(),
            }
        }
    }
}

/// `name` on `path` (colon-separated), executable.
pub fn lookup(name: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn run(cmd: &mut Command) -> Result<String, String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// `(major, minor, text)` of `containerd --version` output, e.g.
/// `containerd github.com/containerd/containerd v1.7.24 <commit>`.
pub fn parse_containerd_version(out: &str) -> Option<(u32, u32, String)> {
    out.split_whitespace().skip(1).find_map(|w| {
        let v = w.strip_prefix('v').unwrap_or(w);
        let mut parts = v.split(['.', '-', '+', '~']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor, v.to_string()))
    })
}

/// A runtime table of containerd's CRI config that uses the runtime type.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeEntry {
    /// The handler name (`runtimes.<name>`).
    pub handler: String,
    /// The CRI plugin it is under.
    pub plugin: String,
    /// Its `options` table, if any.
    pub options: Option<toml::Table>,
    /// Its `runtime_path`, if set.
    pub runtime_path: Option<String>,
}

/// The CRI plugins whose `containerd.runtimes` tables name runtimes: 1.x and 2.x.
const CRI_PLUGINS: &[&str] = &["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"];

/// The runtimes of config `cfg` (as `containerd config dump` prints it) whose
/// `runtime_type` is `runtime_type`, and the `SystemdCgroup` option of the `runc` handler.
pub fn runtimes_of(cfg: &toml::Table, runtime_type: &str) -> (Vec<RuntimeEntry>, Option<bool>) {
    let mut out = Vec::new();
    let mut runc_systemd = None;
    for plugin in CRI_PLUGINS {
        let Some(runtimes) = cfg
            .get("plugins")
            .and_then(|p| p.get(*plugin))
            .and_then(|p| p.get("containerd"))
            .and_then(|c| c.get("runtimes"))
            .and_then(|r| r.as_table())
        else {
            continue;
        };
        for (name, rt) in runtimes {
            let rt_type = rt.get("runtime_type").and_then(|v| v.as_str());
            if name == "runc" {
                runc_systemd = rt
                    .get("options")
                    .and_then(|o| o.get("SystemdCgroup"))
                    .and_then(|v| v.as_bool())
                    .or(runc_systemd);
            }
            if rt_type == Some(runtime_type) {
                out.push(RuntimeEntry {
                    handler: name.clone(),
                    plugin: plugin.to_string(),
                    options: rt.get("options").and_then(|o| o.as_table()).cloned(),
                    runtime_path: rt
                        .get("runtime_path")
                        .and_then(|v| v.as_str())
                        .filter(|s| !s.is_empty())
                        .map(str::to_string),
                });
            }
        }
    }
    (out, runc_systemd)
}

/// The kubelet's cgroup driver from a kubelet config file's top-level `cgroupDriver:`.
pub fn kubelet_driver_from_config(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let v = l.strip_prefix("cgroupDriver:")?;
        let v = v.split('#').next()?.trim().trim_matches(['"', '\'']);
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// Whether the last cgroup mount at `/sys/fs/cgroup` in mountinfo `text` is cgroup2.
fn root_is_cgroup2(text: &str) -> bool {
    let mut v2 = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.get(4) == Some(&CGROUP_ROOT) {
            v2 = fields.get(sep + 1) == Some(&"cgroup2");
        }
    }
    v2
}

/// Runs every check for `target`.
pub fn inspect(target: &Target, opts: &Options) -> Report {
    let mut facts = Facts::default();
    let mut checks = Vec::new();
    let mut add = |check: &'static str, verdict: Verdict, detail: String, fix: Option<String>| {
        checks.push(Check {
            check,
            verdict,
            detail,
            fix,
        })
    };
    let cd = find_containerd(opts.config.as_deref());

    // cgroups, as containerd (and so the shim) sees them.
    let ns_root = cd
        .as_ref()
        .map(|p| PathBuf::from(format!("/proc/{}/root", p.pid)))
        .unwrap_or_else(|| PathBuf::from("/"));
    let mountinfo_file = cd
        .as_ref()
        .map(|p| format!("/proc/{}/mountinfo", p.pid))
        .unwrap_or_else(|| "/proc/self/mountinfo".into());
    let systemd_running = Path::new("/run/systemd/system").is_dir();
    facts.containerd_pid = cd.as_ref().map(|p| p.pid);
    facts.ns_root = ns_root.clone();
    facts.mountinfo = std::fs::read_to_string(&mountinfo_file).unwrap_or_default();
    facts.unified = root_is_cgroup2(&facts.mountinfo);
    let host = std::fs::read_to_string(&mountinfo_file)
        .map_err(|e| e.to_string())
        .and_then(|text| {
            Host::from_mountinfo(&text, root_is_cgroup2(&text), systemd_running)
                .map_err(|e| format!("{e:#}"))
        });
    let mut layout = None;
    let mut cpu_note = None;
    match host {
        Err(e) => add(
            "cgroups",
            Verdict::Fail,
            format!("cannot read the cgroup layout from {mountinfo_file}: {e}"),
            Some("mount cgroupfs at /sys/fs/cgroup".into()),
        ),
        Ok(h) => {
            layout = Some(h.layout());
            let unified = h.unified_root().map(|p| p.to_path_buf());
            let (name, missing, what) = match h.layout() {
                CgroupLayout::Unified => {
                    let file = ns_root
                        .join(
                            unified
                                .as_deref()
                                .unwrap_or(Path::new("/sys/fs/cgroup"))
                                .strip_prefix("/")
                                .unwrap_or(Path::new("")),
                        )
                        .join("cgroup.controllers");
                    let ctl: Vec<String> = std::fs::read_to_string(&file)
                        .unwrap_or_default()
                        .split_whitespace()
                        .map(str::to_string)
                        .collect();
                    // cpu.stat usage is kept for every v2 cgroup (rstat) without the cpu
                    // controller; memory usage needs the memory controller.
                    let missing: Vec<&str> = ["memory"]
                        .into_iter()
                        .filter(|c| !ctl.iter().any(|x| x == c))
                        .collect();
                    if !ctl.iter().any(|x| x == "cpu") {
                        cpu_note = Some("the cpu controller is not enabled: CPU usage is measured (cpu.stat), but CPU requests and limits are not enforced");
                    }
                    (
                        "cgroup v2",
                        missing,
                        format!("controllers: {}", ctl.join(" ")),
                    )
                }
                l => {
                    let hs = h.v1_hierarchies();
                    let missing: Vec<&str> = ["cpu", "cpuacct", "memory"]
                        .into_iter()
                        .filter(|c| !h.offers_controller(c))
                        .collect();
                    let names: Vec<String> = hs.iter().map(|(c, _)| c.clone()).collect();
                    let mut what = format!("v1 hierarchies: {}", names.join(" "));
                    if let Some(u) = &unified {
                        what.push_str(&format!("; cgroup2 at {}", u.display()));
                    }
                    (
                        if l == CgroupLayout::Hybrid {
                            "hybrid (cgroup v1 + v2)"
                        } else {
                            "cgroup v1"
                        },
                        missing,
                        what,
                    )
                }
            };
            if missing.is_empty() {
                match cpu_note {
                    None => add("cgroups", Verdict::Ok, format!("{name}; {what}"), None),
                    Some(note) => add(
                        "cgroups",
                        Verdict::Warn,
                        format!("{name}; {what}; {note}"),
                        Some("enable cpu in the root's cgroup.subtree_control (on hybrid hosts: boot with cgroup v2 only)".into()),
                    ),
                }
            } else {
                add(
                    "cgroups",
                    Verdict::Fail,
                    format!(
                        "{name}; {what}; missing {}: pod usage cannot be measured",
                        missing.join(", ")
                    ),
                    Some("enable the controllers (kernel config, cgroup_enable=..., or cgroup.subtree_control)".into()),
                );
            }
        }
    }

    // systemd.
    let pid1 = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
    let pid1 = pid1.trim();
    facts.systemd_pid1 = pid1 == "systemd";
    if pid1 == "systemd" {
        let version = run(Command::new("systemctl").arg("--version"))
            .ok()
            .and_then(|o| o.lines().next().map(str::to_string))
            .unwrap_or_else(|| "version unknown".into());
        add(
            "systemd",
            Verdict::Ok,
            format!(
                "PID 1 is systemd ({version}); systemd-driver pods get slices under kubepods.slice"
            ),
            None,
        );
    } else {
        add(
            "systemd",
            Verdict::Info,
            format!(
                "PID 1 is `{}`, not systemd: only kubelet's cgroupfs driver can work here",
                if pid1.is_empty() { "?" } else { pid1 }
            ),
            None,
        );
    }

    // containerd.
    let bin = opts
        .containerd
        .clone()
        .or_else(|| cd.as_ref().and_then(|p| p.exe.clone()))
        .or_else(|| lookup("containerd", &std::env::var("PATH").unwrap_or_default()));
    let config = opts
        .config
        .clone()
        .or_else(|| {
            cd.as_ref()
                .and_then(|p| p.flag("--config", Some("-c")).map(PathBuf::from))
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTAINERD_CONFIG));
    match &bin {
        None => add(
            "containerd",
            Verdict::Fail,
            "no containerd binary found (no running containerd, none on PATH)".into(),
            Some("install containerd 1.6 or later, or pass --containerd PATH".into()),
        ),
        Some(b) => match run(Command::new(b).arg("--version")) {
            Err(e) => add(
                "containerd",
                Verdict::Fail,
                format!("{} --version failed: {e}", b.display()),
                None,
            ),
            Ok(out) => match parse_containerd_version(&out) {
                Some((major, minor, v)) if (major, minor) >= (1, 6) => match &cd {
                    Some(p) => add(
                        "containerd",
                        Verdict::Ok,
                        format!("{} {v}, running as pid {}", b.display(), p.pid),
                        None,
                    ),
                    None => add(
                        "containerd",
                        Verdict::Warn,
                        format!(
                            "{} {v}, not running with config {}: checked the binary and the config file only",
                            b.display(),
                            config.display()
                        ),
                        Some("start containerd (or pass the --config it runs with)".into()),
                    ),
                },
                Some((_, _, v)) => add(
                    "containerd",
                    Verdict::Fail,
                    format!(
                        "{} {v}: the shim needs containerd 1.6 or later",
                        b.display()
                    ),
                    Some("upgrade containerd".into()),
                ),
                None => add(
                    "containerd",
                    Verdict::Warn,
                    format!(
                        "{}: cannot read the version from {:?}",
                        b.display(),
                        out.trim()
                    ),
                    None,
                ),
            },
        },
    }

    // The runtime in containerd's effective config.
    let dumped = match &bin {
        Some(b) => run(Command::new(b)
            .arg("--config")
            .arg(&config)
            .args(["config", "dump"]))
        .map_err(|e| {
            format!(
                "`{} --config {} config dump` failed: {e}",
                b.display(),
                config.display()
            )
        }),
        None => std::fs::read_to_string(&config).map_err(|e| format!("{}: {e}", config.display())),
    };
    let parsed = dumped.and_then(|t| {
        toml::from_str::<toml::Table>(&t).map_err(|e| format!("{}: {e}", config.display()))
    });
    facts.containerd_bin = bin.clone();
    if let Ok(cfg) = &parsed {
        facts.cri_socket = Some(PathBuf::from(
            cfg.get("grpc")
                .and_then(|g| g.get("address"))
                .and_then(|a| a.as_str())
                .filter(|a| !a.is_empty())
                .unwrap_or(DEFAULT_CONTAINERD_SOCKET),
        ));
    }
    let mut entries = Vec::new();
    let mut runc_systemd = None;
    match parsed {
        Err(e) => add(
            "runtime",
            Verdict::Fail,
            format!("cannot read containerd's config: {e}"),
            Some(format!(
                "fix {} until `containerd config dump` accepts it",
                config.display()
            )),
        ),
        Ok(cfg) => {
            (entries, runc_systemd) = runtimes_of(&cfg, &target.runtime_type);
            if entries.is_empty() {
                add(
                    "runtime",
                    Verdict::Fail,
                    format!("{} does not register runtime_type {}", config.display(), target.runtime_type),
                    Some(format!(
                        "run the node installer (deployments/node-installer), or add [plugins.\"{}\".containerd.runtimes.{}] runtime_type = \"{}\" and restart containerd",
                        if cfg.get("version").and_then(|v| v.as_integer()) == Some(3) { CRI_PLUGINS[1] } else { CRI_PLUGINS[0] },
                        target.handler,
                        target.runtime_type
                    )),
                );
            } else {
                let desc: Vec<String> = entries
                    .iter()
                    .map(|e| {
                        let opts = match &e.options {
                            None => "no options table".to_string(),
                            Some(t) if t.is_empty() => "empty options table".to_string(),
                            Some(t) => format!(
                                "options {{ {} }} (read by the shim; placement still follows cgroupsPath)",
                                t.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ")
                            ),
                        };
                        format!("handler `{}` ({opts})", e.handler)
                    })
                    .collect();
                if entries.iter().any(|e| e.handler == target.handler) {
                    add(
                        "runtime",
                        Verdict::Ok,
                        format!("{} registered: {}", target.runtime_type, desc.join("; ")),
                        None,
                    );
                } else {
                    add(
                        "runtime",
                        Verdict::Warn,
                        format!("{} registered as {}, but RuntimeClasses use handler `{}`", target.runtime_type, desc.join("; "), target.handler),
                        Some(format!("name the runtime table `{}` or set the RuntimeClass handler to the name used", target.handler)),
                    );
                }
            }
        }
    }

    // The shim binary, where containerd looks for it.
    let path = cd
        .as_ref()
        .and_then(|p| p.env("PATH").map(str::to_string))
        .unwrap_or_else(|| std::env::var("PATH").unwrap_or_default());
    let explicit: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.runtime_path.as_deref())
        .collect();
    if let Some(p) = explicit.first() {
        if lookup(
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(""),
            Path::new(p).parent().and_then(|d| d.to_str()).unwrap_or(""),
        )
        .is_some()
        {
            add("shim", Verdict::Ok, format!("{p} (runtime_path)"), None);
        } else {
            add(
                "shim",
                Verdict::Fail,
                format!("runtime_path {p} is not an executable file"),
                Some(format!("install {} at {p}", target.shim_binary)),
            );
        }
    } else {
        let exe_dir = bin
            .as_ref()
            .and_then(|b| b.parent())
            .map(|d| d.display().to_string());
        let search = match &exe_dir {
            Some(d) => format!("{path}:{d}"),
            None => path.clone(),
        };
        match lookup(&target.shim_binary, &search) {
            Some(p) => add(
                "shim",
                Verdict::Ok,
                format!("{} (found on containerd's PATH)", p.display()),
                None,
            ),
            None => add(
                "shim",
                Verdict::Fail,
                format!(
                    "{} is not on containerd's PATH ({path}){}",
                    target.shim_binary,
                    exe_dir.map(|d| format!(" nor in {d}")).unwrap_or_default()
                ),
                Some(format!(
                    "install {} into /usr/local/bin (or another directory on that PATH)",
                    target.shim_binary
                )),
            ),
        }
    }

    // kubelet's cgroup driver.
    let kubelet = processes_named("kubelet").into_iter().next();
    let flag_driver = kubelet
        .as_ref()
        .and_then(|k| k.flag("--cgroup-driver", None));
    let kcfg = opts
        .kubelet_config
        .clone()
        .or_else(|| {
            kubelet
                .as_ref()
                .and_then(|k| k.flag("--config", None))
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBELET_CONFIG));
    let driver = flag_driver
        .map(|d| (d, "--cgroup-driver".to_string()))
        .or_else(|| {
            std::fs::read_to_string(&kcfg)
                .ok()
                .and_then(|t| kubelet_driver_from_config(&t))
                .map(|d| (d, kcfg.display().to_string()))
        });
    facts.kubelet_driver = driver.as_ref().map(|(d, _)| d.clone());
    facts.runc_systemd = runc_systemd;
    match driver {
        None => add(
            "kubelet",
            Verdict::Info,
            format!(
                "no kubelet cgroup driver found (no kubelet process, no {})",
                kcfg.display()
            ),
            None,
        ),
        Some((d, from)) if d == "systemd" && pid1 != "systemd" => add(
            "kubelet",
            Verdict::Fail,
            format!("cgroup driver systemd ({from}) but PID 1 is not systemd"),
            Some("use kubelet's cgroupfs driver on nodes without systemd".into()),
        ),
        Some((d, from)) => {
            let runc_mismatch = match (d.as_str(), runc_systemd) {
                ("systemd", Some(false)) => Some("runc's SystemdCgroup is false"),
                ("cgroupfs", Some(true)) => Some("runc's SystemdCgroup is true"),
                _ => None,
            };
            match runc_mismatch {
                Some(m) => add(
                    "kubelet",
                    Verdict::Warn,
                    format!("cgroup driver {d} ({from}); the shim follows it from cgroupsPath, but {m}: native runc pods disagree with kubelet"),
                    Some(format!("set SystemdCgroup = {} in the runc runtime's options", d == "systemd")),
                ),
                None => add(
                    "kubelet",
                    Verdict::Ok,
                    format!("cgroup driver {d} ({from}); the shim derives it from each cgroupsPath"),
                    None,
                ),
            }
        }
    }

    // The shim's settings, from containerd's environment.
    if let Some(p) = cd.as_ref() {
        let (verdict, detail, fix) = shim_settings_check(&p.env);
        add("settings", verdict, detail, fix);
    }

    // The compile cache.
    let cache = cd
        .as_ref()
        .and_then(|p| {
            p.env(&target.cache_dir_env)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| target.cache_default.clone());
    let cache_host = ns_root.join(cache.strip_prefix("/").unwrap_or(&cache));
    match std::fs::symlink_metadata(&cache_host) {
        Err(_) => add(
            "cache",
            Verdict::Ok,
            format!(
                "{} does not exist yet (created root-only, 0700, at the first Spin start)",
                cache.display()
            ),
            None,
        ),
        Ok(md) => {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let mode = md.permissions().mode() & 0o7777;
            if !md.is_dir() {
                add(
                    "cache",
                    Verdict::Fail,
                    format!(
                        "{} is not a directory (a link or file is in the way)",
                        cache.display()
                    ),
                    Some(format!("remove {}", cache.display())),
                );
            } else if md.uid() != 0 {
                add("cache", Verdict::Fail, format!("{} is owned by uid {}, not root: its entries are native code every Spin pod runs", cache.display(), md.uid()), Some(format!("chown root:root {0} && chmod 0700 {0}", cache.display())));
            } else if mode & 0o077 != 0 {
                add(
                    "cache",
                    Verdict::Warn,
                    format!(
                        "{} has mode {mode:o}; the shim restores 0700 at the next Spin start",
                        cache.display()
                    ),
                    Some(format!("chmod 0700 {}", cache.display())),
                );
            } else {
                add(
                    "cache",
                    Verdict::Ok,
                    format!("{} root-owned, mode {mode:o}", cache.display()),
                    None,
                );
            }
        }
    }

    // Device rules.
    match layout {
        Some(CgroupLayout::Unified) => match cgroup_placement::device_filter_support() {
            Ok(()) => add(
                "devices",
                Verdict::Ok,
                "cgroup v2 device filters load: the shim attaches one to every container's cgroup".into(),
                None,
            ),
            Err(e) => add(
                "devices",
                Verdict::Warn,
                format!(
                    "cgroup v2 device filters cannot load ({e}): native containers other than the pod sandbox (pause) are refused at Create; Wasm containers run"
                ),
                None,
            ),
        },
        Some(_) => add(
            "devices",
            Verdict::Ok,
            "device rules enforced by the cgroup v1 devices controller".into(),
            None,
        ),
        None => {}
    }

    Report { checks, facts }
}

/// The `settings` check: the shim's settings in `env` (containerd's environment, which the
/// shim inherits), checked as the shim checks them before it serves.
fn shim_settings_check(env: &[(String, String)]) -> (Verdict, String, Option<String>) {
    use spin_shim_settings::{shim::ShimSettings, vars_of, Role};
    let set: Vec<&str> = vars_of(Role::Shim)
        .map(|v| v.name)
        .filter(|n| spin_shim_settings::lookup(env, n).is_some_and(|v| !v.is_empty()))
        .collect();
    match ShimSettings::from_env(env) {
        Err(e) => (
            Verdict::Fail,
            format!("{e}: the shim refuses to start with it, so no pod of this runtime starts"),
            Some(
                "fix or remove it in containerd's environment (e.g. the `Environment=` of its \
                 systemd unit) and restart containerd"
                    .into(),
            ),
        ),
        Ok(_) if set.is_empty() => (
            Verdict::Ok,
            "containerd's environment sets none of the shim's settings: the defaults apply".into(),
            None,
        ),
        Ok(_) => (
            Verdict::Ok,
            format!(
                "containerd's environment sets {}: all valid",
                set.join(", ")
            ),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shims_settings_in_containerds_environment_are_checked() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (v, d, fix) = shim_settings_check(&env(&[("PATH", "/bin")]));
        assert_eq!(v, Verdict::Ok);
        assert!(
            d.contains("none of the shim's settings") && fix.is_none(),
            "{d}"
        );
        let (v, d, _) = shim_settings_check(&env(&[("SPIN_SHIM_STATE_DIR", "/run/s")]));
        assert_eq!(v, Verdict::Ok);
        assert!(d.contains("SPIN_SHIM_STATE_DIR: all valid"), "{d}");
        // The last value wins, as in the shim's environment built from the list.
        let (v, d, fix) = shim_settings_check(&env(&[
            ("SPIN_SHIM_COMPILE_TIMEOUT_SECS", "9"),
            ("SPIN_SHIM_COMPILE_TIMEOUT_SECS", "9s"),
        ]));
        assert_eq!(v, Verdict::Fail);
        assert!(
            d.contains("SPIN_SHIM_COMPILE_TIMEOUT_SECS=`9s` in the shim's environment"),
            "{d}"
        );
        assert!(fix.unwrap().contains("restart containerd"));
    }

    #[test]
    fn versions_of_every_packaging() {
        let v = |s: &str| parse_containerd_version(s).map(|(a, b, _)| (a, b));
        assert_eq!(
            v("containerd github.com/containerd/containerd v1.7.24 61f9fd88"),
            Some((1, 7))
        );
        assert_eq!(
            v("containerd containerd.io 1.6.33 d2d58213f8"),
            Some((1, 6))
        );
        assert_eq!(
            v("containerd github.com/containerd/containerd/v2 v2.1.9 abc"),
            Some((2, 1))
        );
        assert_eq!(
            v("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1"),
            Some((1, 6))
        );
        assert_eq!(v("nonsense"), None);
    }

    #[test]
    fn runtimes_found_in_both_config_layouts() {
        let v2: toml::Table = toml::from_str(
            r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.spin]
runtime_type = "io.containerd.spin.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.spin.options]
SystemdCgroup = true
"#,
        )
        .unwrap();
        let (e, runc) = runtimes_of(&v2, "io.containerd.spin.v2");
        assert_eq!(runc, Some(true));
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].handler, "spin");
        assert_eq!(
            e[0].options.as_ref().unwrap()["SystemdCgroup"].as_bool(),
            Some(true)
        );
        let v3: toml::Table = toml::from_str(
            r#"version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.wasm]
runtime_type = "io.containerd.spin.v2"
runtime_path = "/opt/shim"
"#,
        )
        .unwrap();
        let (e, runc) = runtimes_of(&v3, "io.containerd.spin.v2");
        assert_eq!(runc, None);
        assert_eq!(e[0].handler, "wasm");
        assert_eq!(e[0].runtime_path.as_deref(), Some("/opt/shim"));
        assert!(e[0].options.is_none());
        assert!(runtimes_of(&v3, "io.containerd.other.v2").0.is_empty());
    }

    #[test]
    fn kubelet_driver_from_its_config() {
        let cfg = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd # set by kubeadm\n";
        assert_eq!(kubelet_driver_from_config(cfg).as_deref(), Some("systemd"));
        assert_eq!(
            kubelet_driver_from_config("cgroupDriver: \"cgroupfs\"\n").as_deref(),
            Some("cgroupfs")
        );
        assert_eq!(
            kubelet_driver_from_config("  nested:\n    cgroupDriver: x\n"),
            None
        );
    }

    #[test]
    fn cgroup2_root_is_the_last_mount_there() {
        let hybrid = "30 24 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n\
                      31 30 0:27 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw\n";
        assert!(!root_is_cgroup2(hybrid));
        let bound = format!("{hybrid}99 30 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        assert!(root_is_cgroup2(&bound));
    }

    #[test]
    fn exit_code_follows_failures() {
        let mut r = Report {
            facts: Facts::default(),
            checks: vec![Check {
                check: "a",
                verdict: Verdict::Warn,
                detail: "x".into(),
                fix: None,
            }],
        };
        assert_eq!(r.exit_code(), 0);
        assert!(r.text().contains("verdict: pods"));
        r.checks.push(Check {
            check: "b",
            verdict: Verdict::Fail,
            detail: "y".into(),
            fix: Some("z".into()),
        });
        assert_eq!(r.exit_code(), 1);
        assert!(r.text().contains("fix: z") && r.text().contains("1 check(s) failed"));
        let j: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(j["ok"], false);
        assert_eq!(j["checks"][1]["verdict"], "fail");
    }
}
