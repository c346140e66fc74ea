//! Guest isolation limits: the per-request deadline, the HTTP trigger's timeouts and
//! connection cap, and the per-instance memory cap with its default derived from the
//! container's cgroup memory limit.
//!
//! Every figure has an environment knob, read and checked by the settings module
//! ([`spin_shim_settings::container`]); [`Limits::from_settings`] takes them from there.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Env var: how long one request may run (guest code and host calls) before it is ended
/// with 504. A duration (`60`, `60s`, `1500ms`, `2m`); `0` disables the deadline.
pub const REQUEST_TIMEOUT_ENV: &str = spin_shim_settings::container::REQUEST_TIMEOUT;
/// Default request deadline: the default `proxy-read-timeout` of ingress-nginx (60 s), the
/// usual proxy in front of a Kubernetes service; a request running longer has already
/// been answered with 504 by such a proxy.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Env var: how long a client may take to send a complete request head (slowloris
/// bound). A duration; `0` disables it.
pub const HEADER_READ_TIMEOUT_ENV: &str = spin_shim_settings::container::HEADER_READ_TIMEOUT;
/// Default header-read timeout: hyper's own default once a timer is set (30 s).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Env var: how long a keep-alive connection may sit idle between requests before it is
/// closed. A duration; `0` disables it.
pub const IDLE_TIMEOUT_ENV: &str = spin_shim_settings::container::IDLE_TIMEOUT;
/// Default idle timeout. hyper starts its header-read timer as soon as it waits for the
/// next request on a kept-alive connection, so idle time is bounded by the header-read
/// timeout too; the idle default matches it (30 s) and the knob only shortens it.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Env var: most connections served at once; further clients wait in the listen backlog
/// until one closes.
pub const MAX_CONNECTIONS_ENV: &str = spin_shim_settings::container::MAX_CONNECTIONS;
/// The largest request or response body passed whole to or from a component that takes
/// its body whole (Spin 1.x's `handle-request` and `send-request`, WAGI).
pub const MAX_BODY_BYTES: usize = 64 << 20;
/// Env var: how long a connection may make no progress writing its response (the client
/// does not read, or its receive window stays closed) before it is closed. A duration (`30`,
/// `30s`, `1500ms`, `2m`); `0` disables it.
pub const WRITE_TIMEOUT_ENV: &str = spin_shim_settings::container::WRITE_TIMEOUT;
/// Default write timeout: the header-read and idle timeouts' 30 s. A client reading at any
/// pace keeps its connection; one that stops reading frees its slot after this.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Env var: how many requests one instance of a WASIp3 component serves before it is
/// dropped (Spin's and `wasmtime serve`'s `--max-instance-reuse-count`); `1` gives every
/// request a fresh instance, as for WASIp2 components.
pub const MAX_INSTANCE_REUSE_COUNT_ENV: &str =
    spin_shim_settings::container::MAX_INSTANCE_REUSE_COUNT;
/// Default reuse count: Spin's and `wasmtime serve`'s for WASIp3 components.
pub const DEFAULT_MAX_INSTANCE_REUSE_COUNT: usize = 128;
/// Env var: how many requests one instance of a WASIp3 component serves at once
/// (`--max-instance-concurrent-reuse-count`).
pub const MAX_INSTANCE_CONCURRENT_REUSE_COUNT_ENV: &str =
    spin_shim_settings::container::MAX_INSTANCE_CONCURRENT_REUSE_COUNT;
/// Default concurrent reuse count: Spin's and `wasmtime serve`'s for WASIp3 components.
pub const DEFAULT_MAX_INSTANCE_CONCURRENT_REUSE_COUNT: usize = 16;
/// Env var: how long an idle WASIp3 instance is kept for the next request
/// (`--idle-instance-timeout`). A duration; `0` drops an instance as soon as it is idle.
pub const IDLE_INSTANCE_TIMEOUT_ENV: &str = spin_shim_settings::container::IDLE_INSTANCE_TIMEOUT;
/// Default idle-instance timeout: Spin's and `wasmtime serve`'s (1 s).
pub const DEFAULT_IDLE_INSTANCE_TIMEOUT: Duration = Duration::from_secs(1);

/// File descriptors kept back from the connection cap for the runtime's own use (app files,
/// key-value databases, outbound connections, the compile cache).
pub const RESERVED_FDS: u64 = 64;
/// Upper bound of the default connection cap.
pub const MAX_DEFAULT_CONNECTIONS: usize = 4096;

/// Epoch tick (Spin's `DEFAULT_EPOCH_TICK_INTERVAL`, 10 ms): how often running guest code
/// checks whether its [`TimeSlice`] is used up.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The time a guest may hold its executor thread before it yields: one [`EPOCH_TICK`],
/// counted from the request's start and from each resumption after a yield.
///
/// Yielding at every tick instead (Spin's way) yields a short request that merely runs
/// across a tick boundary, which then waits behind every other ready request, and yields a
/// resumed guest again at once when a tick passed while it was queued. With a slice, a
/// request shorter than a tick never yields and a long one runs at least a tick after each
/// resumption; no guest holds a thread longer than two ticks between yields.
#[derive(Debug)]
pub struct TimeSlice {
    origin: Instant,
    /// Nanoseconds from `origin` to the start of the current slice.
    started: AtomicU64,
}

impl TimeSlice {
    /// A slice starting now.
    pub fn start() -> Self {
        TimeSlice {
            origin: Instant::now(),
            started: AtomicU64::new(0),
        }
    }

    /// Whether the current slice has lasted [`EPOCH_TICK`] or more.
    pub fn used_up(&self) -> bool {
        self.used_up_at(Instant::now())
    }

    /// Starts the next slice now (after the guest was resumed).
    pub fn restart(&self) {
        self.restart_at(Instant::now());
    }

    fn used_up_at(&self, now: Instant) -> bool {
        let started = self.origin + Duration::from_nanos(self.started.load(Ordering::Relaxed));
        now.saturating_duration_since(started) >= EPOCH_TICK
    }

    fn restart_at(&self, now: Instant) {
        let ns = now.saturating_duration_since(self.origin).as_nanos();
        self.started
            .store(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// The request and connection limits of the HTTP trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Per-request deadline; `None` = none.
    pub request_timeout: Option<Duration>,
    /// Request head read timeout; `None` = none.
    pub header_read_timeout: Option<Duration>,
    /// Keep-alive idle timeout; `None` = none.
    pub idle_timeout: Option<Duration>,
    /// Response write timeout ([`WRITE_TIMEOUT_ENV`]); `None` = none.
    pub write_timeout: Option<Duration>,
    /// Connection cap.
    pub max_connections: usize,
    /// Instance reuse for WASIp3 components.
    pub reuse: InstanceReuse,
}

/// How instances of a WASIp3 (`wasi:http/handler@0.3`) component are reused, as Spin and
/// `wasmtime serve` do by default: such a component may serve several requests, also at
/// once, from one instance (its global state persists between them). WASIp2 handlers are
/// synchronous exports and always get a fresh instance per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceReuse {
    /// Requests one instance serves in all ([`MAX_INSTANCE_REUSE_COUNT_ENV`]).
    pub max_requests: usize,
    /// Requests one instance serves at once ([`MAX_INSTANCE_CONCURRENT_REUSE_COUNT_ENV`]).
    pub max_concurrent: usize,
    /// How long an idle instance waits for its next request ([`IDLE_INSTANCE_TIMEOUT_ENV`]).
    pub idle_timeout: Duration,
}

impl Default for InstanceReuse {
    fn default() -> Self {
        InstanceReuse {
            max_requests: DEFAULT_MAX_INSTANCE_REUSE_COUNT,
            max_concurrent: DEFAULT_MAX_INSTANCE_CONCURRENT_REUSE_COUNT,
            idle_timeout: DEFAULT_IDLE_INSTANCE_TIMEOUT,
        }
    }
}

impl Default for Limits {
    /// The defaults, with the connection cap derived from this process's file limit.
    fn default() -> Self {
        Limits {
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            header_read_timeout: Some(DEFAULT_HEADER_READ_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            write_timeout: Some(DEFAULT_WRITE_TIMEOUT),
            max_connections: default_max_connections(),
            reuse: InstanceReuse::default(),
        }
    }
}

impl Limits {
    /// The limits the container's settings give; unset ones take the defaults, the
    /// connection cap the one derived from the file limit.
    pub fn from_settings(s: &spin_shim_settings::container::ContainerSettings) -> Limits {
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Limits {
            request_timeout: s.request_timeout,
            header_read_timeout: s.header_read_timeout,
            idle_timeout: s.idle_timeout,
            write_timeout: s.write_timeout,
            max_connections: s
                .max_connections
                .map(count)
                .unwrap_or_else(default_max_connections),
            reuse: InstanceReuse {
                max_requests: count(s.max_instance_reuse_count),
                max_concurrent: count(s.max_instance_concurrent_reuse_count),
                idle_timeout: s.idle_instance_timeout.unwrap_or(Duration::ZERO),
            },
        }
    }
}

/// The default connection cap: the soft `RLIMIT_NOFILE` minus [`RESERVED_FDS`], between 16
/// and [`MAX_DEFAULT_CONNECTIONS`]. Beyond the file limit `accept` fails anyway; the
/// reserve keeps the app's own files and outbound requests working at the cap.
pub fn default_max_connections() -> usize {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur
    } else {
        1024
    };
    soft.saturating_sub(RESERVED_FDS)
        .clamp(16, MAX_DEFAULT_CONNECTIONS as u64) as usize
}

/// v1 `memory.limit_in_bytes` at or above this is "no limit" (the kernel reports
/// `PAGE_COUNTER_MAX` pages, 0x7FFFFFFFFFFFF000 on x86_64).
const V1_UNLIMITED: u64 = 1 << 62;

/// The memory limit of the cgroup this process runs in: the smallest `memory.max` (v2) or
/// `memory.limit_in_bytes` (v1) of its cgroup and the cgroup's ancestors, found through
/// `/proc/self/cgroup` under `/sys/fs/cgroup`. `None` when no limit is set or none can be
/// read.
pub fn container_memory_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    memory_limit_from(&text, Path::new("/sys/fs/cgroup"))
}

/// As [`container_memory_limit`] for a given `/proc/self/cgroup` text and cgroup root.
///
/// Inside a container with its own cgroup namespace the path is `/` and the root itself is
/// the container's cgroup; both cases are read.
pub fn memory_limit_from(proc_self_cgroup: &str, root: &Path) -> Option<u64> {
    let mut best: Option<u64> = None;
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (mount, file) = if id == "0" && controllers.is_empty() {
            // The unified hierarchy: at the root on v2 hosts, at `unified/` on hybrid ones.
            (root.to_path_buf(), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes")
        } else {
            continue;
        };
        let mut mounts = vec![mount.clone()];
        if file == "memory.max" {
            mounts.push(root.join("unified"));
        }
        for mount in mounts {
            for dir in ancestors(&mount, path) {
                if let Some(limit) = read_limit(&dir.join(file)) {
                    best = Some(best.map_or(limit, |b| b.min(limit)));
                }
            }
        }
    }
    best
}

/// `mount/<path>` and each of its parents up to `mount` itself.
fn ancestors(mount: &Path, cgroup_path: &str) -> Vec<PathBuf> {
    let rel = cgroup_path.trim_start_matches('/');
    let mut out = Vec::new();
    let mut dir = mount.join(rel);
    loop {
        out.push(dir.clone());
        if dir == mount || !dir.pop() || !dir.starts_with(mount) {
            break;
        }
    }
    out
}

fn read_limit(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let v = text.trim();
    if v == "max" {
        return None;
    }
    let n: u64 = v.parse().ok()?;
    (n < V1_UNLIMITED).then_some(n)
}

/// The container's memory limit: the smaller of the cgroup's (`cgroup`, from
/// [`container_memory_limit`]) and the OCI spec's (`spec`). On a cgroup v1 (hybrid) host
/// youki gives a container without a cgroup namespace an empty tmpfs at `/sys/fs/cgroup`
/// (measured: `ctr run` on containerd 1.7), so the cgroup's limit cannot be read from inside;
/// the spec's is the one the shim applied to the cgroup.
pub fn effective_memory_limit(cgroup: Option<u64>, spec: Option<u64>) -> Option<u64> {
    match (cgroup, spec) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The default per-instance memory cap for a container memory limit: half of it, at most
/// 4 GiB (the wasm32 address space). The other half is for the runtime itself (measured
/// container RSS 19-34 MiB for the hello and cpu apps, docs/benchmarks.md) and the
/// instances' non-linear memory, so that at a 128 MiB pod limit one instance growing to its
/// cap still leaves 64 MiB, twice the runtime's measured need.
pub fn default_instance_memory(container_limit: u64) -> usize {
    (container_limit / 2).min(4 << 30) as usize
}

/// The store limiter: caps linear memory growth and remembers the first growth it refused,
/// so the request's failure can say so.
#[derive(Debug, Default)]
pub struct MemoryLimiter {
    max: Option<usize>,
    refused: Option<usize>,
    usage: Option<std::sync::Arc<crate::metrics::InstanceUsage>>,
}

impl MemoryLimiter {
    /// A limiter capping each linear memory at `max` bytes (`None` = no cap).
    pub fn new(max: Option<usize>) -> Self {
        MemoryLimiter {
            max,
            refused: None,
            usage: None,
        }
    }

    /// Also accounts the instance's memory and CPU time to component `component`'s usage
    /// metrics, when they are recorded ([`crate::metrics::InstanceUsage`]).
    pub fn with_usage(mut self, component: &str) -> Self {
        self.usage = crate::metrics::InstanceUsage::start(component);
        self
    }

    /// The instance's usage account, for [`crate::metrics::cpu_timed`].
    pub fn usage(&self) -> Option<std::sync::Arc<crate::metrics::InstanceUsage>> {
        self.usage.clone()
    }

    /// The size a refused growth asked for, if one was refused.
    pub fn refused(&self) -> Option<usize> {
        self.refused
    }

    /// The cap, if any.
    pub fn max(&self) -> Option<usize> {
        self.max
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if let Some(max) = self.max {
            if desired > max {
                self.refused.get_or_insert(desired);
                return Ok(false);
            }
        }
        let allowed = maximum.is_none_or(|m| desired <= m);
        if let (true, Some(u)) = (allowed, &self.usage) {
            u.memory_grew(current, desired);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|m| desired <= m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits of an environment of `pairs`, or the settings' error.
    fn limits(pairs: &[(&str, &str)]) -> Result<Limits, String> {
        let env: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        spin_shim_settings::container::ContainerSettings::from_env(&env)
            .map(|s| Limits::from_settings(&s))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn limits_from_settings() {
        let l = limits(&[]).unwrap();
        assert_eq!(l.request_timeout, Some(DEFAULT_REQUEST_TIMEOUT));
        assert_eq!(l.header_read_timeout, Some(DEFAULT_HEADER_READ_TIMEOUT));
        assert_eq!(l.idle_timeout, Some(DEFAULT_IDLE_TIMEOUT));
        assert_eq!(l.write_timeout, Some(DEFAULT_WRITE_TIMEOUT));
        assert_eq!(l.max_connections, default_max_connections());
        assert!(l.max_connections >= 16);
        let l = limits(&[
            (REQUEST_TIMEOUT_ENV, "0"),
            (IDLE_TIMEOUT_ENV, "2s"),
            (MAX_CONNECTIONS_ENV, "7"),
        ])
        .unwrap();
        assert_eq!(l.request_timeout, None);
        assert_eq!(l.idle_timeout, Some(Duration::from_secs(2)));
        assert_eq!(l.max_connections, 7);
        let e = limits(&[(MAX_CONNECTIONS_ENV, "0")]).unwrap_err();
        assert!(e.contains(MAX_CONNECTIONS_ENV), "{e}");
        let e = limits(&[(REQUEST_TIMEOUT_ENV, "soon")]).unwrap_err();
        assert!(e.contains("SPIN_SHIM_REQUEST_TIMEOUT=`soon`"), "{e}");
    }

    #[test]
    fn instance_reuse_defaults_are_spins_and_each_knob_is_checked() {
        let r = limits(&[]).unwrap().reuse;
        assert_eq!(r, InstanceReuse::default());
        assert_eq!((r.max_requests, r.max_concurrent), (128, 16));
        assert_eq!(r.idle_timeout, Duration::from_secs(1));
        let r = limits(&[
            (MAX_INSTANCE_REUSE_COUNT_ENV, "1"),
            (MAX_INSTANCE_CONCURRENT_REUSE_COUNT_ENV, "4"),
            (IDLE_INSTANCE_TIMEOUT_ENV, "0"),
        ])
        .unwrap()
        .reuse;
        assert_eq!((r.max_requests, r.max_concurrent), (1, 4));
        assert_eq!(r.idle_timeout, Duration::ZERO);
        for var in [
            MAX_INSTANCE_REUSE_COUNT_ENV,
            MAX_INSTANCE_CONCURRENT_REUSE_COUNT_ENV,
        ] {
            for bad in ["0", "-3", "many"] {
                let e = limits(&[(var, bad)]).unwrap_err();
                assert!(e.contains(var) && e.contains(bad), "{e}");
            }
        }
        let e = limits(&[(IDLE_INSTANCE_TIMEOUT_ENV, "soon")]).unwrap_err();
        assert!(e.contains(IDLE_INSTANCE_TIMEOUT_ENV), "{e}");
    }

    #[test]
    fn memory_limit_v1_v2_and_ancestors() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        // v2 host: container limit 512 MiB below a pod limit of 256 MiB.
        let pod = root.join("kubepods/pod1");
        let ctr = pod.join("ctr");
        std::fs::create_dir_all(&ctr).unwrap();
        std::fs::write(root.join("kubepods/memory.max"), "max\n").unwrap();
        std::fs::write(pod.join("memory.max"), "268435456\n").unwrap();
        std::fs::write(ctr.join("memory.max"), "536870912\n").unwrap();
        assert_eq!(
            memory_limit_from("0::/kubepods/pod1/ctr\n", root),
            Some(256 << 20)
        );
        // Own cgroup namespace: path `/`, the root is the container's cgroup.
        std::fs::write(root.join("memory.max"), "134217728\n").unwrap();
        assert_eq!(memory_limit_from("0::/\n", root), Some(128 << 20));
        // v1 memory hierarchy, unlimited value ignored.
        let d1 = tempfile::tempdir().unwrap();
        let m = d1.path().join("memory/a");
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(m.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        let text = "12:pids:/a\n5:cpu,memory:/a\n0::/a\n";
        assert_eq!(memory_limit_from(text, d1.path()), None);
        std::fs::write(m.join("memory.limit_in_bytes"), "67108864\n").unwrap();
        assert_eq!(memory_limit_from(text, d1.path()), Some(64 << 20));
        assert_eq!(default_instance_memory(128 << 20), 64 << 20);
        assert_eq!(default_instance_memory(64 << 30), 4 << 30);
    }

    #[test]
    fn a_time_slice_lasts_one_tick_from_its_start_and_from_each_restart() {
        let slice = TimeSlice::start();
        let t0 = slice.origin;
        assert!(!slice.used_up_at(t0));
        assert!(!slice.used_up_at(t0 + EPOCH_TICK - Duration::from_micros(1)));
        assert!(slice.used_up_at(t0 + EPOCH_TICK));
        // Resumed 25 ms in: a fresh tick from there, whatever passed while it was queued.
        slice.restart_at(t0 + Duration::from_millis(25));
        assert!(!slice.used_up_at(t0 + Duration::from_millis(30)));
        assert!(slice.used_up_at(t0 + Duration::from_millis(35)));
        // A clock read before the slice's start (another thread's `now`) is not used up.
        assert!(!slice.used_up_at(t0));
    }
}
