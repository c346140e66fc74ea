//! Giving back memory a long-lived shim process holds only because it once needed it.
//!
//! The shim is one large binary (wasmtime, youki, the Spin runtime): every process of a pod
//! (the server, the container-creation helper, each container's runtime) maps all of its
//! code, and the kernel maps in 64 KiB around every page it faults. After Create a server
//! idles on its ttrpc socket and a container's runtime serves requests, yet both keep the
//! pages of everything their start ran (libcontainer, the compile plan, loading the app):
//! about 10 MiB of code per process, counted in each process's PSS.
//!
//! [`ExecutableCode::release`] drops this process's mappings of the executable's read-only
//! segments (`MADV_DONTNEED`): the pages stay in the page cache, shared by every pod of the
//! node, and the code the process runs afterwards faults back in. Only mappings with no
//! private (anonymous) page are dropped, so relocated data (`.data.rel.ro`, written by the
//! loader before `main`) is never touched; those mappings are read-only, so they cannot
//! gain one afterwards. [`trim_heap`] returns the allocator's free memory to the kernel.

use std::io::{BufRead, BufReader};

/// Address ranges of this process's mappings of its own executable that hold no private
/// page: its code and read-only data, as loaded from the file.
#[derive(Debug, Clone, Default)]
pub struct ExecutableCode {
    ranges: Vec<(usize, usize)>,
}

impl ExecutableCode {
    /// Finds the ranges in `/proc/self/smaps` (a confined process, which may not read
    /// `/proc`, calls this before it confines itself).
    pub fn find() -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let exe = std::fs::metadata("/proc/self/exe")?;
        let smaps = std::fs::File::open("/proc/self/smaps")?;
        let ranges = clean_ranges(
            BufReader::new(smaps).lines().map_while(Result::ok),
            exe.ino(),
            (libc::major(exe.dev()) as u64, libc::minor(exe.dev()) as u64),
        );
        Ok(ExecutableCode { ranges })
    }

    /// Bytes of address space the ranges cover.
    pub fn bytes(&self) -> usize {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    /// Unmaps the ranges' resident pages from this process (`MADV_DONTNEED`); they fault
    /// back in from the page cache when run or read again. Returns the first error.
    pub fn release(&self) -> std::io::Result<()> {
        for &(start, end) in &self.ranges {
            // SAFETY: the range is a read-only, private file mapping of the executable with
            // no anonymous page (checked by `find`, and read-only mappings cannot gain one):
            // dropping its pages only makes the next access fault them in again from the
            // same file.
            if unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
            } != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Makes every thread of this process allocate from glibc's main arena (`M_ARENA_MAX` = 1).
/// Call it before the process starts a thread. By default glibc gives each thread that
/// allocates an arena of its own (up to 8 per CPU), each keeping its live chunks and
/// bookkeeping pages: about 0.6 MiB in a shim server of 8 threads whose work is a few ttrpc
/// calls per container, where one arena's lock costs nothing, and about 0.5 MiB in an idle
/// Spin container (its tokio workers and blocking threads), whose hot small allocations come
/// from each thread's cache without the arena's lock. The musl build (mimalloc) is
/// unaffected.
pub fn single_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes a tuning parameter of the allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Returns the free memory of the C allocator's arenas to the kernel (glibc `malloc_trim`;
/// the static musl build allocates with mimalloc, which returns memory on its own).
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// [`ExecutableCode::release`] and [`trim_heap`] for a process that is not confined (the
/// shim server, the container-creation helper): called once a burst of work is over.
pub fn release_idle_memory() {
    trim_heap();
    match ExecutableCode::find().and_then(|code| code.release().map(|()| code.bytes())) {
        Ok(bytes) => tracing::debug!(mapped_bytes = bytes, "released the executable's idle pages"),
        Err(e) => tracing::debug!("releasing the executable's idle pages: {e}"),
    }
}

/// Env var: seconds without work (under 1% of a CPU) after which a serving process gives
/// back its executable's pages again ([`spawn_idle_release`]); `0` turns this off.
pub const IDLE_RELEASE_ENV: &str = spin_shim_settings::shim::IDLE_RELEASE_SECS;

/// Default of [`IDLE_RELEASE_ENV`].
pub const DEFAULT_IDLE_RELEASE_SECS: u64 = spin_shim_settings::shim::DEFAULT_IDLE_RELEASE_SECS;

/// The idle period from [`IDLE_RELEASE_ENV`]; `None` when turned off. In a container's
/// runtime it is the container's setting, in the shim the shim's (both validated at start).
pub fn idle_release_period() -> Option<std::time::Duration> {
    use spin_shim_settings::{container::ContainerSettings, shim::ShimSettings};
    match ContainerSettings::current() {
        Some(c) => c.idle_release,
        None => ShimSettings::get().idle_release,
    }
}

/// CPU time this process has used (user and system, all threads) and its minor page
/// faults.
fn usage() -> (std::time::Duration, u64) {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000)
    };
    (
        tv(ru.ru_utime) + tv(ru.ru_stime),
        ru.ru_minflt.max(0) as u64,
    )
}

/// Page faults since the last release below which there is too little to give back.
const FAULTS_WORTH_RELEASING: u64 = 64;

/// Starts a thread that gives back the free heap and `code`'s pages whenever a `period`
/// passes with the process idle (under 1% of a CPU) after it faulted pages in since the
/// last release: what a burst of requests or calls brought in (one-off paths, and the
/// kernel's read-around of the code they ran) is not kept by a pod that is not serving.
/// The next request faults back what it runs, from the page cache. Needs no `/proc` (it
/// works confined). The thread sleeps between checks and ends with the process.
pub fn spawn_idle_release(code: ExecutableCode, period: std::time::Duration) {
    let spawned = std::thread::Builder::new()
        .name("idle-release".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let (mut last_cpu, mut released_faults) = usage();
            loop {
                std::thread::sleep(period);
                let (cpu, faults) = usage();
                let idle = cpu.saturating_sub(last_cpu) * 100 < period;
                if idle && faults.saturating_sub(released_faults) >= FAULTS_WORTH_RELEASING {
                    trim_heap();
                    if let Err(e) = code.release() {
                        tracing::debug!("releasing the executable's idle pages: {e}");
                        return;
                    }
                    released_faults = usage().1;
                }
                last_cpu = cpu;
            }
        });
    if let Err(e) = spawned {
        tracing::debug!("starting the idle-release thread: {e}");
    }
}

/// The ranges of `smaps` lines that map the file (`inode`, `(major, minor)`) privately,
/// without write permission and with `Anonymous: 0 kB`.
fn clean_ranges(
    smaps: impl Iterator<Item = String>,
    inode: u64,
    dev: (u64, u64),
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    // The current mapping, if it is a read-only private mapping of the executable.
    let mut current: Option<(usize, usize)> = None;
    for line in smaps {
        if let Some(range) = mapping_header(&line, inode, dev) {
            current = range;
        } else if let Some(anon) = line.strip_prefix("Anonymous:") {
            if let Some(r) = current.take() {
                if anon.trim() == "0 kB" {
                    out.push(r);
                }
            }
        }
    }
    out
}

/// For a mapping's header line, `Some(range)` when it maps the executable read-only and
/// private, `Some(None)` for any other mapping; `None` for a field line.
#[allow(clippy::option_option)]
fn mapping_header(line: &str, inode: u64, dev: (u64, u64)) -> Option<Option<(usize, usize)>> {
    let mut f = line.split_ascii_whitespace();
    let (range, perms, _offset, device, ino) =
        (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let (start, end) = range.split_once('-')?;
    let (start, end) = (
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    );
    // Field lines ("Rss:  12 kB") never parse as a hex range with a dash.
    let ours = ino.parse::<u64>().ok() == Some(inode)
        && device.split_once(':').and_then(|(ma, mi)| {
            Some((
                u64::from_str_radix(ma, 16).ok()?,
                u64::from_str_radix(mi, 16).ok()?,
            ))
        }) == Some(dev)
        && perms.len() == 4
        && perms.starts_with('r')
        && perms.as_bytes()[1] == b'-'
        && perms.ends_with('p');
    Some(ours.then_some((start, end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a1000000 r--p 00000000 fd:01 4242    /shim
Rss:                1024 kB
Anonymous:             0 kB
55d0a1000000-55d0a4000000 r-xp 01000000 fd:01 4242    /shim
Rss:               17000 kB
Anonymous:             0 kB
55d0a4000000-55d0a4400000 r--p 04000000 fd:01 4242    /shim
Rss:                3160 kB
Anonymous:          3160 kB
55d0a4400000-55d0a4410000 rw-p 04400000 fd:01 4242    /shim
Anonymous:            64 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:01 77    /usr/lib/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000300000 r--p 00000000 fd:02 4242    /other-device
Anonymous:             0 kB
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
Anonymous:           100 kB
";

    #[test]
    fn only_clean_read_only_mappings_of_the_executable() {
        let lines = SMAPS.lines().map(str::to_string);
        let got = clean_ranges(lines, 4242, (0xfd, 0x01));
        assert_eq!(
            got,
            vec![
                (0x55d0a0000000, 0x55d0a1000000),
                (0x55d0a1000000, 0x55d0a4000000)
            ]
        );
    }

    /// Resident KiB of this process's mappings in `ranges`.
    fn resident_kib(ranges: &[(usize, usize)]) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut kib = 0;
        for line in smaps.lines() {
            let first = line.split_ascii_whitespace().next().unwrap_or("");
            if let Some((s, _)) = first.split_once('-') {
                if let Ok(s) = usize::from_str_radix(s, 16) {
                    inside = ranges.iter().any(|r| r.0 == s);
                    continue;
                }
            }
            if let (true, Some(v)) = (inside, line.strip_prefix("Rss:")) {
                kib += v.trim().trim_end_matches(" kB").parse::<u64>().unwrap();
            }
        }
        kib
    }

    #[test]
    fn releasing_unmaps_code_and_the_process_runs_on() {
        let code = ExecutableCode::find().unwrap();
        assert!(code.bytes() > 0, "the test binary maps its code: {code:?}");
        let before = resident_kib(&code.ranges);
        code.release().unwrap();
        // Code and constants fault back in as they are used.
        assert_eq!(format!("{}", 6 * 7), "42");
        let after = resident_kib(&code.ranges);
        assert!(
            after < before,
            "resident code should drop: {before} KiB before, {after} KiB after"
        );
        release_idle_memory();
        assert!(ExecutableCode::find().unwrap().bytes() > 0);
    }
}
