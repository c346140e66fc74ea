//! Reading what a cgroup used into containerd's metrics messages.
//!
//! Units are those containerd's own cgroup readers (containerd/cgroups) report: v1 CPU in
//! nanoseconds (`cpuacct.stat` ticks converted with `CLK_TCK`), v2 CPU in microseconds as
//! the kernel writes them, memory in bytes; a v2 `max` limit reads as `u64::MAX`, a v1
//! `pids.max` of `max` as 0.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use containerd_shim_protos::cgroups::metrics as v1;
use containerd_shim_protos::cgroups_v2::metrics as v2;
use protobuf::well_known_types::any::Any;
use protobuf::{Message, MessageField};

/// Type URL of the v1 metrics message, as containerd's typeurl registers it.
pub const V1_METRICS_TYPE_URL: &str = "io.containerd.cgroups.v1.Metrics";
/// Type URL of the v2 metrics message, as containerd's typeurl registers it.
pub const V2_METRICS_TYPE_URL: &str = "io.containerd.cgroups.v2.Metrics";

/// Metrics of one cgroup, in the message containerd expects for the host's layout.
#[derive(Debug, Clone, PartialEq)]
pub enum Metrics {
    /// `io.containerd.cgroups.v1.Metrics` (legacy and hybrid hosts).
    V1(v1::Metrics),
    /// `io.containerd.cgroups.v2.Metrics` (unified hosts).
    V2(v2::Metrics),
}

impl Metrics {
    /// Packs the message into an `Any` whose type URL is the bare containerd name
    /// (`io.containerd.cgroups.v1.Metrics` / `io.containerd.cgroups.v2.Metrics`).
    pub fn to_any(&self) -> anyhow::Result<Any> {
        let (type_url, value) = match self {
            Metrics::V1(m) => (V1_METRICS_TYPE_URL, m.write_to_bytes()?),
            Metrics::V2(m) => (V2_METRICS_TYPE_URL, m.write_to_bytes()?),
        };
        let mut any = Any::new();
        any.type_url = type_url.to_string();
        any.value = value;
        Ok(any)
    }

    /// Total CPU time in nanoseconds, as containerd's CRI converts it
    /// (`UsageCoreNanoSeconds`): v1 usage total, v2 `usage_usec` x 1000.
    pub fn cpu_usage_ns(&self) -> Option<u64> {
        match self {
            Metrics::V1(m) => m.cpu.as_ref()?.usage.as_ref().map(|u| u.total),
            Metrics::V2(m) => m.cpu.as_ref().map(|c| c.usage_usec.saturating_mul(1000)),
        }
    }

    /// Working set in bytes as kubelet/containerd compute it: usage minus inactive file
    /// pages (v1 `total_inactive_file`, v2 `inactive_file`), floored at 0.
    pub fn working_set_bytes(&self) -> Option<u64> {
        match self {
            Metrics::V1(m) => {
                let mem = m.memory.as_ref()?;
                let usage = mem.usage.as_ref()?.usage;
                Some(usage.saturating_sub(mem.total_inactive_file))
            }
            Metrics::V2(m) => {
                let mem = m.memory.as_ref()?;
                Some(mem.usage.saturating_sub(mem.inactive_file))
            }
        }
    }
}

/// Reads a file that may legitimately be absent (no such controller, no PSI, no swap):
/// `Ok(None)` for ENOENT, EOPNOTSUPP and ENODEV.
fn read_optional(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e)
            if e.kind() == ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::EOPNOTSUPP)
                || e.raw_os_error() == Some(libc::ENODEV) =>
        {
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Parses a flat-keyed file (`key value` per line).
fn parse_flat_keyed(text: &str, path: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut map = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.split_whitespace();
        let (Some(key), Some(value), None) = (it.next(), it.next(), it.next()) else {
            bail!(
                "{}: malformed line {line:?}, expected \"key value\"",
                path.display()
            );
        };
        let value = value
            .parse()
            .with_context(|| format!("{}: bad number in line {line:?}", path.display()))?;
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

fn read_flat_keyed(path: &Path) -> anyhow::Result<Option<BTreeMap<String, u64>>> {
    read_optional(path)?
        .map(|t| parse_flat_keyed(&t, path))
        .transpose()
}

/// Reads a single-number file; `max` maps to `max_value`.
fn read_u64(path: &Path, max_value: u64) -> anyhow::Result<Option<u64>> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let t = text.trim();
    if t == "max" {
        return Ok(Some(max_value));
    }
    t.parse()
        .map(Some)
        .with_context(|| format!("{}: expected a number, found {t:?}", path.display()))
}

/// Parses a PSI file (`some avg10=.. avg60=.. avg300=.. total=..` and `full ...`).
pub fn parse_psi(text: &str, path: &Path) -> anyhow::Result<v2::PSIStats> {
    let mut stats = v2::PSIStats::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.split_whitespace();
        let kind = it.next().unwrap_or_default();
        let mut data = v2::PSIData::new();
        for field in it {
            let (k, v) = field
                .split_once('=')
                .with_context(|| format!("{}: malformed PSI field {field:?}", path.display()))?;
            let bad = || format!("{}: bad PSI value in {field:?}", path.display());
            match k {
                "avg10" => data.avg10 = v.parse().with_context(bad)?,
                "avg60" => data.avg60 = v.parse().with_context(bad)?,
                "avg300" => data.avg300 = v.parse().with_context(bad)?,
                "total" => data.total = v.parse().with_context(bad)?,
                _ => {}
            }
        }
        match kind {
            "some" => stats.some = MessageField::some(data),
            "full" => stats.full = MessageField::some(data),
            other => bail!("{}: unknown PSI line kind {other:?}", path.display()),
        }
    }
    Ok(stats)
}

/// Reads a PSI file if present (absent or unsupported -> `None`).
pub fn read_psi(path: &Path) -> anyhow::Result<Option<v2::PSIStats>> {
    read_optional(path)?
        .map(|t| parse_psi(&t, path))
        .transpose()
}

/// Reads the cgroup v2 metrics of the cgroup directory `dir`.
///
/// Fails only when `dir` does not exist or a present file is malformed; absent files
/// (controller not enabled, no PSI, no swap) leave their fields empty.
pub fn read_v2_metrics(dir: &Path) -> anyhow::Result<v2::Metrics> {
    if !dir.is_dir() {
        bail!("cgroup {} does not exist", dir.display());
    }
    let f = |name: &str| dir.join(name);
    let mut m = v2::Metrics::new();

    if let Some(pids_current) = read_u64(&f("pids.current"), u64::MAX)? {
        let mut pids = v2::PidsStat::new();
        pids.current = pids_current;
        pids.limit = read_u64(&f("pids.max"), u64::MAX)?.unwrap_or_default();
        m.pids = MessageField::some(pids);
    }

    let cpu_stat = read_flat_keyed(&f("cpu.stat"))?;
    let cpu_psi = read_psi(&f("cpu.pressure"))?;
    if cpu_stat.is_some() || cpu_psi.is_some() {
        let s = cpu_stat.unwrap_or_default();
        let g = |k: &str| s.get(k).copied().unwrap_or_default();
        let mut cpu = v2::CPUStat::new();
        cpu.usage_usec = g("usage_usec");
        cpu.user_usec = g("user_usec");
        cpu.system_usec = g("system_usec");
        cpu.nr_periods = g("nr_periods");
        cpu.nr_throttled = g("nr_throttled");
        cpu.throttled_usec = g("throttled_usec");
        cpu.nr_bursts = g("nr_bursts");
        cpu.burst_usec = g("burst_usec");
        cpu.psi = cpu_psi.into();
        m.cpu = MessageField::some(cpu);
    }

    let mem_stat = read_flat_keyed(&f("memory.stat"))?;
    let usage = read_u64(&f("memory.current"), u64::MAX)?;
    let mem_psi = read_psi(&f("memory.pressure"))?;
    if mem_stat.is_some() || usage.is_some() || mem_psi.is_some() {
        let s = mem_stat.unwrap_or_default();
        let g = |k: &str| s.get(k).copied().unwrap_or_default();
        let mut mem = v2::MemoryStat::new();
        mem.anon = g("anon");
        mem.file = g("file");
        mem.kernel_stack = g("kernel_stack");
        mem.slab = g("slab");
        mem.sock = g("sock");
        mem.shmem = g("shmem");
        mem.file_mapped = g("file_mapped");
        mem.file_dirty = g("file_dirty");
        mem.file_writeback = g("file_writeback");
        mem.anon_thp = g("anon_thp");
        mem.inactive_anon = g("inactive_anon");
        mem.active_anon = g("active_anon");
        mem.inactive_file = g("inactive_file");
        mem.active_file = g("active_file");
        mem.unevictable = g("unevictable");
        mem.slab_reclaimable = g("slab_reclaimable");
        mem.slab_unreclaimable = g("slab_unreclaimable");
        mem.pgfault = g("pgfault");
        mem.pgmajfault = g("pgmajfault");
        mem.workingset_refault = g("workingset_refault");
        mem.workingset_activate = g("workingset_activate");
        mem.workingset_nodereclaim = g("workingset_nodereclaim");
        mem.pgrefill = g("pgrefill");
        mem.pgscan = g("pgscan");
        mem.pgsteal = g("pgsteal");
        mem.pgactivate = g("pgactivate");
        mem.pgdeactivate = g("pgdeactivate");
        mem.pglazyfree = g("pglazyfree");
        mem.pglazyfreed = g("pglazyfreed");
        mem.thp_fault_alloc = g("thp_fault_alloc");
        mem.thp_collapse_alloc = g("thp_collapse_alloc");
        mem.usage = usage.unwrap_or_default();
        mem.usage_limit = read_u64(&f("memory.max"), u64::MAX)?.unwrap_or_default();
        mem.max_usage = read_u64(&f("memory.peak"), u64::MAX)?.unwrap_or_default();
        mem.swap_usage = read_u64(&f("memory.swap.current"), u64::MAX)?.unwrap_or_default();
        mem.swap_limit = read_u64(&f("memory.swap.max"), u64::MAX)?.unwrap_or_default();
        mem.swap_max_usage = read_u64(&f("memory.swap.peak"), u64::MAX)?.unwrap_or_default();
        mem.psi = mem_psi.into();
        m.memory = MessageField::some(mem);
    }

    if let Some(events) = read_flat_keyed(&f("memory.events"))? {
        let g = |k: &str| events.get(k).copied().unwrap_or_default();
        let mut ev = v2::MemoryEvents::new();
        ev.low = g("low");
        ev.high = g("high");
        ev.max = g("max");
        ev.oom = g("oom");
        ev.oom_kill = g("oom_kill");
        ev.oom_group_kill = g("oom_group_kill");
        m.memory_events = MessageField::some(ev);
    }

    for size in hugepage_sizes(dir, ".current")? {
        let mut h = v2::HugeTlbStat::new();
        h.current = read_u64(&f(&format!("hugetlb.{size}.current")), u64::MAX)?.unwrap_or_default();
        h.max = read_u64(&f(&format!("hugetlb.{size}.max")), u64::MAX)?.unwrap_or_default();
        if let Some(events) = read_flat_keyed(&f(&format!("hugetlb.{size}.events")))? {
            h.failcnt = events.get("max").copied().unwrap_or_default();
        }
        h.pagesize = size;
        m.hugetlb.push(h);
    }

    let io_stat = read_optional(&f("io.stat"))?;
    let io_psi = read_psi(&f("io.pressure"))?;
    if io_stat.is_some() || io_psi.is_some() {
        let mut io = v2::IOStat::new();
        if let Some(text) = io_stat {
            io.usage = parse_io_stat(&text, &f("io.stat"))?;
        }
        io.psi = io_psi.into();
        m.io = MessageField::some(io);
    }
    Ok(m)
}

/// Page sizes (e.g. `2MB`) for which `dir` has a `hugetlb.<size><suffix>` file, sorted.
fn hugepage_sizes(dir: &Path, suffix: &str) -> anyhow::Result<Vec<String>> {
    let mut sizes = Vec::new();
    for entry in crate::fsutil::dir_entries(dir)? {
        let name = entry.file_name();
        let Some(size) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugetlb."))
            .and_then(|n| n.strip_suffix(suffix))
        else {
            continue;
        };
        // Skip hugetlb.<size>.rsvd.* and other sub-files.
        if !size.contains('.') {
            sizes.push(size.to_string());
        }
    }
    sizes.sort();
    Ok(sizes)
}

/// Parses `io.stat`: `MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=.. dbytes=.. dios=..`.
fn parse_io_stat(text: &str, path: &Path) -> anyhow::Result<Vec<v2::IOEntry>> {
    let mut entries = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.split_whitespace();
        let dev = it.next().unwrap_or_default();
        let (major, minor) = parse_dev(dev)
            .with_context(|| format!("{}: bad device in line {line:?}", path.display()))?;
        let mut e = v2::IOEntry::new();
        e.major = major;
        e.minor = minor;
        for field in it {
            let Some((k, v)) = field.split_once('=') else {
                bail!("{}: malformed field {field:?}", path.display());
            };
            let v: u64 = v
                .parse()
                .with_context(|| format!("{}: bad number in {field:?}", path.display()))?;
            match k {
                "rbytes" => e.rbytes = v,
                "wbytes" => e.wbytes = v,
                "rios" => e.rios = v,
                "wios" => e.wios = v,
                _ => {}
            }
        }
        entries.push(e);
    }
    Ok(entries)
}

fn parse_dev(dev: &str) -> Option<(u64, u64)> {
    let (major, minor) = dev.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Reads the cgroup v1 metrics from the container's directories, given as (controllers
/// of the hierarchy joined with `,`, directory) pairs, e.g. `("cpuacct", "/sys/fs/cgroup/cpuacct/x")`.
///
/// Fails only when none of the directories exists or a present file is malformed; absent
/// hierarchies and files leave their fields empty.
pub fn read_v1_metrics(dirs: &[(String, PathBuf)]) -> anyhow::Result<v1::Metrics> {
    if !dirs.iter().any(|(_, d)| d.is_dir()) {
        let list: Vec<String> = dirs.iter().map(|(_, d)| d.display().to_string()).collect();
        bail!("none of the cgroup directories exists: {}", list.join(", "));
    }
    let dir_for = |controller: &str| -> Option<&Path> {
        dirs.iter()
            .find(|(c, d)| c.split(',').any(|x| x == controller) && d.is_dir())
            .map(|(_, d)| d.as_path())
    };
    let mut m = v1::Metrics::new();

    // CPU: cpuacct for usage, cpu for throttling (separate hierarchies on some hosts).
    let mut cpu = v1::CPUStat::new();
    let mut have_cpu = false;
    if let Some(dir) = dir_for("cpuacct") {
        let mut usage = v1::CPUUsage::new();
        if let Some(total) = read_u64(&dir.join("cpuacct.usage"), 0)? {
            usage.total = total;
        }
        if let Some(text) = read_optional(&dir.join("cpuacct.usage_percpu"))? {
            usage.per_cpu = text
                .split_whitespace()
                .map(|v| v.parse::<u64>())
                .collect::<Result<_, _>>()
                .with_context(|| format!("{}: bad per-CPU usage", dir.display()))?;
        }
        if let Some(stat) = read_flat_keyed(&dir.join("cpuacct.stat"))? {
            let ticks = clock_ticks();
            let ns = |k: &str| stat.get(k).copied().unwrap_or_default() * 1_000_000_000 / ticks;
            usage.user = ns("user");
            usage.kernel = ns("system");
        }
        cpu.usage = MessageField::some(usage);
        have_cpu = true;
    }
    if let Some(dir) = dir_for("cpu") {
        if let Some(stat) = read_flat_keyed(&dir.join("cpu.stat"))? {
            let g = |k: &str| stat.get(k).copied().unwrap_or_default();
            let mut t = v1::Throttle::new();
            t.periods = g("nr_periods");
            t.throttled_periods = g("nr_throttled");
            t.throttled_time = g("throttled_time");
            cpu.throttling = MessageField::some(t);
            have_cpu = true;
        }
    }
    if have_cpu {
        m.cpu = MessageField::some(cpu);
    }

    if let Some(dir) = dir_for("memory") {
        m.memory = MessageField::some(read_v1_memory(dir)?);
        if let Some(oom) = read_flat_keyed(&dir.join("memory.oom_control"))? {
            let g = |k: &str| oom.get(k).copied().unwrap_or_default();
            let mut o = v1::MemoryOomControl::new();
            o.oom_kill_disable = g("oom_kill_disable");
            o.under_oom = g("under_oom");
            o.oom_kill = g("oom_kill");
            m.memory_oom_control = MessageField::some(o);
        }
    }

    if let Some(dir) = dir_for("pids") {
        if let Some(current) = read_u64(&dir.join("pids.current"), 0)? {
            let mut p = v1::PidsStat::new();
            p.current = current;
            p.limit = read_u64(&dir.join("pids.max"), 0)?.unwrap_or_default();
            m.pids = MessageField::some(p);
        }
    }

    if let Some(dir) = dir_for("hugetlb") {
        for size in hugepage_sizes(dir, ".usage_in_bytes")? {
            let get = |suffix: &str| -> anyhow::Result<u64> {
                let path = dir.join(format!("hugetlb.{size}.{suffix}"));
                Ok(read_u64(&path, u64::MAX)?.unwrap_or_default())
            };
            let mut h = v1::HugetlbStat::new();
            h.usage = get("usage_in_bytes")?;
            h.max = get("max_usage_in_bytes")?;
            h.failcnt = get("failcnt")?;
            h.pagesize = size;
            m.hugetlb.push(h);
        }
    }

    if let Some(dir) = dir_for("blkio") {
        m.blkio = MessageField::some(read_v1_blkio(dir)?);
    }
    Ok(m)
}

/// `sysconf(_SC_CLK_TCK)`, the unit of `cpuacct.stat` (100 on Linux).
fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

fn read_v1_memory(dir: &Path) -> anyhow::Result<v1::MemoryStat> {
    let mut mem = v1::MemoryStat::new();
    if let Some(s) = read_flat_keyed(&dir.join("memory.stat"))? {
        let g = |k: &str| s.get(k).copied().unwrap_or_default();
        mem.cache = g("cache");
        mem.rss = g("rss");
        mem.rss_huge = g("rss_huge");
        mem.mapped_file = g("mapped_file");
        mem.dirty = g("dirty");
        mem.writeback = g("writeback");
        mem.pg_pg_in = g("pgpgin");
        mem.pg_pg_out = g("pgpgout");
        mem.pg_fault = g("pgfault");
        mem.pg_maj_fault = g("pgmajfault");
        mem.inactive_anon = g("inactive_anon");
        mem.active_anon = g("active_anon");
        mem.inactive_file = g("inactive_file");
        mem.active_file = g("active_file");
        mem.unevictable = g("unevictable");
        mem.hierarchical_memory_limit = g("hierarchical_memory_limit");
        mem.hierarchical_swap_limit = g("hierarchical_memsw_limit");
        mem.total_cache = g("total_cache");
        mem.total_rss = g("total_rss");
        mem.total_rss_huge = g("total_rss_huge");
        mem.total_mapped_file = g("total_mapped_file");
        mem.total_dirty = g("total_dirty");
        mem.total_writeback = g("total_writeback");
        mem.total_pg_pg_in = g("total_pgpgin");
        mem.total_pg_pg_out = g("total_pgpgout");
        mem.total_pg_fault = g("total_pgfault");
        mem.total_pg_maj_fault = g("total_pgmajfault");
        mem.total_inactive_anon = g("total_inactive_anon");
        mem.total_active_anon = g("total_active_anon");
        mem.total_inactive_file = g("total_inactive_file");
        mem.total_active_file = g("total_active_file");
        mem.total_unevictable = g("total_unevictable");
    }
    mem.usage = read_memory_entry(dir, "memory")?.into();
    mem.swap = read_memory_entry(dir, "memory.memsw")?.into();
    mem.kernel = read_memory_entry(dir, "memory.kmem")?.into();
    mem.kernel_tcp = read_memory_entry(dir, "memory.kmem.tcp")?.into();
    Ok(mem)
}

/// `<prefix>.usage_in_bytes`, `.limit_in_bytes`, `.max_usage_in_bytes`, `.failcnt`;
/// `None` when the usage file is absent (e.g. no swap accounting).
fn read_memory_entry(dir: &Path, prefix: &str) -> anyhow::Result<Option<v1::MemoryEntry>> {
    let Some(usage) = read_u64(&dir.join(format!("{prefix}.usage_in_bytes")), u64::MAX)? else {
        return Ok(None);
    };
    let get = |suffix: &str| -> anyhow::Result<u64> {
        Ok(read_u64(&dir.join(format!("{prefix}.{suffix}")), u64::MAX)?.unwrap_or_default())
    };
    let mut e = v1::MemoryEntry::new();
    e.usage = usage;
    e.limit = get("limit_in_bytes")?;
    e.max = get("max_usage_in_bytes")?;
    e.failcnt = get("failcnt")?;
    Ok(Some(e))
}

/// blkio statistics: the CFQ `*_recursive` files when the kernel has them, else BFQ's,
/// else the throttle layer's, as containerd falls back.
fn read_v1_blkio(dir: &Path) -> anyhow::Result<v1::BlkIOStat> {
    let mut b = v1::BlkIOStat::new();
    let read = |name: &str| -> anyhow::Result<Vec<v1::BlkIOEntry>> {
        let path = dir.join(name);
        match read_optional(&path)? {
            Some(text) => parse_blkio(&text, &path),
            None => Ok(Vec::new()),
        }
    };
    if dir.join("blkio.io_serviced_recursive").exists() {
        b.io_service_bytes_recursive = read("blkio.io_service_bytes_recursive")?;
        b.io_serviced_recursive = read("blkio.io_serviced_recursive")?;
        b.io_queued_recursive = read("blkio.io_queued_recursive")?;
        b.io_service_time_recursive = read("blkio.io_service_time_recursive")?;
        b.io_wait_time_recursive = read("blkio.io_wait_time_recursive")?;
        b.io_merged_recursive = read("blkio.io_merged_recursive")?;
        b.io_time_recursive = read("blkio.time_recursive")?;
        b.sectors_recursive = read("blkio.sectors_recursive")?;
    } else if dir.join("blkio.bfq.io_serviced_recursive").exists() {
        b.io_service_bytes_recursive = read("blkio.bfq.io_service_bytes_recursive")?;
        b.io_serviced_recursive = read("blkio.bfq.io_serviced_recursive")?;
    } else {
        b.io_service_bytes_recursive = read("blkio.throttle.io_service_bytes_recursive")?;
        b.io_serviced_recursive = read("blkio.throttle.io_serviced_recursive")?;
    }
    // BFQ kernels keep the throttle counters too; use them if BFQ reported nothing.
    if b.io_service_bytes_recursive.is_empty() {
        b.io_service_bytes_recursive = read("blkio.throttle.io_service_bytes_recursive")?;
        b.io_serviced_recursive = read("blkio.throttle.io_serviced_recursive")?;
    }
    Ok(b)
}

/// Parses blkio lines `MAJ:MIN Op value` (or `MAJ:MIN value`); `Total n` lines are skipped.
fn parse_blkio(text: &str, path: &Path) -> anyhow::Result<Vec<v1::BlkIOEntry>> {
    let mut entries = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() == Some(&"Total") {
            continue;
        }
        let (dev, op, value) = match fields.as_slice() {
            [dev, op, value] => (*dev, *op, *value),
            [dev, value] => (*dev, "", *value),
            _ => bail!("{}: malformed line {line:?}", path.display()),
        };
        let (major, minor) = parse_dev(dev)
            .with_context(|| format!("{}: bad device in line {line:?}", path.display()))?;
        let mut e = v1::BlkIOEntry::new();
        e.op = op.to_string();
        e.major = major;
        e.minor = minor;
        e.value = value
            .parse()
            .with_context(|| format!("{}: bad number in line {line:?}", path.display()))?;
        entries.push(e);
    }
    Ok(entries)
}
