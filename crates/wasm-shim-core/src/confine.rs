//! How a container's runtime process (the Wasm engine, in-process after pivot_root) confines
//! itself before the first guest instruction.
//!
//! A guest that reaches native code in the runtime process (a wasmtime or host-interface bug;
//! before this module, simply `/proc/self/mem` through the WASI `/` preopen) must find nothing
//! more than the image's files, the container's volumes and its own sockets:
//! - **Files**: a Landlock domain allows every subtree of `/` that holds no forbidden mount
//!   (procfs, sysfs, device nodes, cgroupfs, debugfs, ...: [`FORBIDDEN_FS`], and anything at
//!   or below [`FORBIDDEN_PATHS`]), computed from `/proc/self/mountinfo` ([`AllowList`]). A
//!   directory above a forbidden mount (`/` itself, a volume holding a hostPath of `/proc`)
//!   gets no right of its own, only rules on each of its other entries: a Landlock right on a
//!   directory covers everything below it, so even `ReadDir` on `/` would let a guest list
//!   `/proc`. Consequence: the guest cannot list `/` nor create entries directly in it;
//!   everything below the image's top-level entries is as before. Abstract unix sockets and
//!   signals outside the container's domain are scoped out too (Landlock ABI 6+).
//! - **Capabilities**: all dropped (effective, permitted, inheritable, ambient and bounding).
//!   The runtime binds its listener before it confines itself, so it needs none afterwards.
//! - **no_new_privs**, and a **seccomp** filter of its own ([`DENIED_SYSCALLS`]: what a Wasm
//!   runtime never needs: ptrace, process_vm_*, mount, namespaces, kexec, bpf, keyrings,
//!   modules, mknod, exec, ...), failing with `EPERM`, synchronised to every thread.
//!
//! Capabilities and Landlock domains belong to a thread, not to the process (Landlock's
//! thread-synchronising flag is newer than the kernels nodes run): one call covers every
//! thread only while the process has a single one. [`Confinement::apply`] therefore refuses
//! to run unless the calling thread is the only one, and the engines call it after opening
//! what they need from outside the app (the pooling allocator's `/proc/self/pagemap`, the
//! cgroup memory limit, the listener, the WASI `/` preopen) and before they start any thread.
//!
//! Without Landlock (a kernel built without it, or with it left out of `lsm=`), the files
//! part falls back to what the runtime shows the guest: preopens of the allowed subtrees
//! instead of `/` ([`Confinement::guest_dirs`]), with one warning naming the reason; the other
//! parts apply as usual.

use std::collections::BTreeSet;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context as _};

/// Filesystem types no guest may see, wherever they are mounted (a volume included).
pub const FORBIDDEN_FS: &[&str] = &[
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "configfs",
    "bpf",
    "fusectl",
    "pstore",
    "efivarfs",
    "binfmt_misc",
    "selinuxfs",
    "nsfs",
    "mqueue",
    "hugetlbfs",
    "autofs",
    "rpc_pipefs",
];

/// Paths no guest may see, whatever is mounted there (the container's `/dev` is a tmpfs of
/// device nodes).
pub const FORBIDDEN_PATHS: &[&str] = &["/proc", "/sys", "/dev"];

/// System calls the runtime process never makes once it runs guests; they fail with `EPERM`.
/// `clone3` fails with `ENOSYS` (libc then uses `clone`, whose namespace flags are checked),
/// as in Docker's default profile.
pub const DENIED_SYSCALLS: &[&str] = &[
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "mknod",
    "mknodat",
    "open_by_handle_at",
    "name_to_handle_at",
    "personality",
    "acct",
    "swapon",
    "swapoff",
    "quotactl",
    "quotactl_fd",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "modify_ldt",
    "syslog",
    "vhangup",
    "lookup_dcookie",
    "nfsservctl",
    "uselib",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    "execve",
    "execveat",
];

/// `clone` flags that make a namespace: `clone` with any of them fails with `EPERM`.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// How many entries of the image's filesystem [`AllowList::forbid_image_devices`] looks at
/// when a container starts (an app image holds far fewer).
pub const MAX_SCANNED_ENTRIES: usize = 200_000;

/// One mount of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount point (relative to the process's root).
    pub point: PathBuf,
    /// The filesystem type.
    pub fstype: String,
}

/// Parses `/proc/self/mountinfo` text (malformed lines are skipped).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let fstype = right.split(' ').next()?;
            Some(Mount {
                point: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(point))),
                fstype: fstype.to_string(),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let d = |k: usize| u32::from(b[i + k] - b'0');
            out.push((d(1) * 64 + d(2) * 8 + d(3)) as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Lexically normalised absolute form of `p` (no `.`/`..`; `..` at the root stays there).
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// What the guest may see below a root directory: the paths no guest may reach
/// ([`FORBIDDEN_PATHS`] and every mount of a [`FORBIDDEN_FS`] type), and from them the
/// subtrees and files that are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList {
    /// Forbidden paths, in the container's terms (absolute).
    forbidden: BTreeSet<PathBuf>,
}

/// An allowed path below the root: a whole directory tree or one file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Allowed {
    /// A directory and everything below it.
    Tree(PathBuf),
    /// One regular file.
    File(PathBuf),
}

impl AllowList {
    /// From the mounts of `/proc/self/mountinfo`.
    pub fn from_mounts(mounts: &[Mount]) -> Self {
        let mut forbidden: BTreeSet<PathBuf> = FORBIDDEN_PATHS.iter().map(PathBuf::from).collect();
        for m in mounts {
            if FORBIDDEN_FS.contains(&m.fstype.as_str()) {
                forbidden.insert(normalise(&m.point));
            }
        }
        let mut allow = AllowList { forbidden };
        allow.dedup();
        allow
    }

    /// Drops forbidden paths below other forbidden ones (they add nothing).
    fn dedup(&mut self) {
        let all = self.forbidden.clone();
        self.forbidden
            .retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    }

    /// Forbids the device nodes of the image: those on the filesystem of the root directory
    /// `root` (the container's `/`; volumes, other mounts and forbidden paths are not
    /// entered). containerd unpacks an image's device nodes as they are, and a guest opening
    /// one through a preopen would meet only the device cgroup. At most `max_entries`
    /// entries are looked at; returns how many device nodes it found, or `Err` with the count
    /// of entries when it stopped at the bound.
    pub fn forbid_image_devices(
        &mut self,
        root: &Path,
        max_entries: usize,
    ) -> Result<usize, usize> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let Ok(root_dev) = std::fs::symlink_metadata(root).map(|m| m.dev()) else {
            return Ok(0);
        };
        let mut found = Vec::new();
        let mut todo = vec![PathBuf::from("/")];
        let mut seen = 0usize;
        let mut stopped = false;
        'walk: while let Some(dir) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(host_path(root, &dir)) else {
                continue;
            };
            for e in entries.flatten() {
                if seen == max_entries {
                    stopped = true;
                    break 'walk;
                }
                seen += 1;
                let path = dir.join(e.file_name());
                let Ok(meta) = e.metadata() else { continue };
                let ft = meta.file_type();
                if ft.is_block_device() || ft.is_char_device() {
                    found.push(path);
                } else if ft.is_dir() && meta.dev() == root_dev && !self.is_forbidden(&path) {
                    todo.push(path);
                }
            }
        }
        let n = found.len();
        self.forbidden.extend(found);
        self.dedup();
        if stopped {
            Err(seen)
        } else {
            Ok(n)
        }
    }

    /// The forbidden paths (absolute, in the container's terms).
    pub fn forbidden(&self) -> impl Iterator<Item = &Path> {
        self.forbidden.iter().map(PathBuf::as_path)
    }

    /// Whether container path `p` (absolute, symlinks already resolved) is forbidden: at or
    /// below a forbidden path.
    pub fn is_forbidden(&self, p: &Path) -> bool {
        let p = normalise(p);
        self.forbidden.iter().any(|f| p.starts_with(f))
    }

    /// Whether a forbidden path lies strictly below container path `p`.
    fn holds_forbidden(&self, p: &Path) -> bool {
        let p = normalise(p);
        self.forbidden.iter().any(|f| f != &p && f.starts_with(&p))
    }

    /// The allowed paths below container directory `dir`, read through host directory
    /// `root` (the container's `/`: `/` in the container, a temp dir in tests): `dir` itself
    /// when nothing below it is forbidden, else (recursively) each of its entries that is
    /// allowed. Symlinks are skipped (they resolve to a path with its own verdict), as are
    /// device nodes, FIFOs and sockets. Results are container paths.
    pub fn allowed_below(&self, root: &Path, dir: &Path) -> Vec<Allowed> {
        let mut out = Vec::new();
        self.walk(root, &normalise(dir), &mut out, 0);
        out.sort();
        out
    }

    fn walk(&self, root: &Path, dir: &Path, out: &mut Vec<Allowed>, depth: usize) {
        if self.is_forbidden(dir) {
            return;
        }
        if !self.holds_forbidden(dir) {
            out.push(Allowed::Tree(dir.to_path_buf()));
            return;
        }
        // Forbidden mount points are at most a few levels deep; a bound keeps a hostile
        // layout from recursing without end.
        if depth > 64 {
            return;
        }
        let host = host_path(root, dir);
        let Ok(entries) = std::fs::read_dir(&host) else {
            return;
        };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let child = dir.join(e.file_name());
            if ft.is_dir() {
                self.walk(root, &child, out, depth + 1);
            } else if ft.is_file() && !self.is_forbidden(&child) {
                out.push(Allowed::File(child));
            }
        }
    }
}

/// Host path of container path `p` below `root`.
fn host_path(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

/// Whether the kernel enforces Landlock here: its ABI version, or why not.
fn landlock_abi() -> Result<i64, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        return Ok(v);
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            "the kernel is built without Landlock (CONFIG_SECURITY_LANDLOCK)".to_string()
        }
        Some(libc::EOPNOTSUPP) => {
            "Landlock is not enabled at boot (add landlock to the kernel's lsm= list)".to_string()
        }
        _ => format!("landlock_create_ruleset failed: {e}"),
    })
}

/// A container runtime's confinement, prepared while it still sees everything (see the
/// module docs): the allow-list from `/proc/self/mountinfo` and whether Landlock is there.
#[derive(Debug, Clone)]
pub struct Confinement {
    root: PathBuf,
    allow: AllowList,
    /// Landlock's ABI version, or why it is unavailable.
    landlock: Result<i64, String>,
    /// The executable's clean mappings, found while `/proc` is still readable.
    code: crate::memory::ExecutableCode,
}

/// What [`Confinement::apply`] did, for the log line and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Landlock ABI version enforced and the number of rules; `None` without Landlock.
    pub landlock: Option<(i64, usize)>,
    /// Whether the bounding set could be emptied (needs CAP_SETPCAP in the spec's set).
    pub bounding_cleared: bool,
    /// System calls the seccomp filter denies.
    pub denied_syscalls: usize,
}

impl Confinement {
    /// Reads this process's mounts (`/proc/self/mountinfo`; without it only
    /// [`FORBIDDEN_PATHS`] are known) and probes Landlock; warns once when Landlock is
    /// unavailable.
    pub fn for_this_process() -> Self {
        let mounts = match std::fs::read_to_string("/proc/self/mountinfo") {
            Ok(t) => parse_mountinfo(&t),
            Err(e) => {
                tracing::warn!(
                    "cannot read /proc/self/mountinfo ({e}): only {FORBIDDEN_PATHS:?} are hidden \
                     from guests"
                );
                Vec::new()
            }
        };
        let mut allow = AllowList::from_mounts(&mounts);
        match allow.forbid_image_devices(Path::new("/"), MAX_SCANNED_ENTRIES) {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                "the image holds {n} device node(s) outside /dev: hidden from guests"
            ),
            Err(n) => tracing::warn!(
                "stopped looking for device nodes in the image after {n} entries: nodes \
                 further down are left to the device cgroup"
            ),
        }
        let mut c = Self::new(Path::new("/"), allow, landlock_abi());
        match crate::memory::ExecutableCode::find() {
            Ok(code) => c.code = code,
            Err(e) => tracing::debug!("finding the executable's mappings in /proc/self/smaps: {e}"),
        }
        if let Err(reason) = &c.landlock {
            tracing::warn!(
                "Landlock is unavailable ({reason}): guests get preopens of the allowed \
                 directories instead of `/` (no /proc, /sys, /dev), but host code is not \
                 confined to them; capabilities, no_new_privs and seccomp still apply"
            );
        }
        c
    }

    /// A confinement of root `root` with `allow`; `landlock`: its ABI, or why it is missing.
    pub fn new(root: &Path, allow: AllowList, landlock: Result<i64, String>) -> Self {
        Confinement {
            root: root.to_path_buf(),
            allow,
            landlock,
            code: Default::default(),
        }
    }

    /// Gives back memory only the runtime's start needed, once it serves: the free heap
    /// and the executable's pages mapped so far, of which those still used fault back in
    /// ([`crate::memory`]). Works confined: the mappings were found by
    /// [`Confinement::for_this_process`]. Call it once.
    /// Afterwards, each time the runtime has been idle for `SPIN_SHIM_IDLE_RELEASE_SECS`
    /// (default 30) after work, it does so again ([`crate::memory::spawn_idle_release`]).
    pub fn release_startup_memory(&self) {
        crate::memory::trim_heap();
        if let Err(e) = self.code.release() {
            tracing::debug!("releasing the executable's idle pages: {e}");
        }
        if let Some(period) = crate::memory::idle_release_period() {
            crate::memory::spawn_idle_release(self.code.clone(), period);
        }
    }

    /// Whether the kernel will enforce the files part (Landlock).
    pub fn landlock(&self) -> bool {
        self.landlock.is_ok()
    }

    /// The allow-list.
    pub fn allow_list(&self) -> &AllowList {
        &self.allow
    }

    /// Fails when `source` (a path the runtime would show a guest: a Spin `files` entry)
    /// resolves to a forbidden path, naming it.
    pub fn check_source(&self, source: &Path) -> anyhow::Result<()> {
        let host = std::fs::canonicalize(source)
            .with_context(|| format!("cannot resolve {}", source.display()))?;
        let in_container = Path::new("/").join(host.strip_prefix(&self.root).unwrap_or(&host));
        if self.allow.is_forbidden(&in_container) {
            bail!(
                "{} resolves to {}, a path no guest may see (procfs, sysfs, device nodes, \
                 cgroupfs and other kernel filesystems are hidden from Wasm guests); point it \
                 at a directory of the app",
                source.display(),
                in_container.display()
            );
        }
        Ok(())
    }

    /// The host directories to preopen for guest directory `dir` (a container path), each
    /// as (host path, path relative to `dir`): `[dir]` when nothing below it is forbidden,
    /// or when Landlock holds and the runtime opens `dir` before it confines itself
    /// (`opened_early`: the WASI `/`; Landlock then denies what is forbidden below it and
    /// listing `dir` itself); otherwise the allowed directory trees below it (files directly
    /// in a directory above a forbidden mount are left out).
    pub fn guest_dirs(&self, dir: &Path, opened_early: bool) -> Vec<(PathBuf, PathBuf)> {
        let dir = normalise(dir);
        if self.allow.is_forbidden(&dir) {
            return Vec::new();
        }
        if (opened_early && self.landlock()) || !self.allow.holds_forbidden(&dir) {
            return vec![(host_path(&self.root, &dir), PathBuf::new())];
        }
        self.allow
            .allowed_below(&self.root, &dir)
            .into_iter()
            .filter_map(|a| match a {
                Allowed::Tree(p) => {
                    let rel = p.strip_prefix(&dir).ok()?.to_path_buf();
                    Some((host_path(&self.root, &p), rel))
                }
                Allowed::File(_) => None,
            })
            .collect()
    }

    /// Confines the calling process (see the module docs). Must be called while the calling
    /// thread is the process's only one: fails otherwise, as it does when any part cannot be
    /// applied (the runtime must then not run guests).
    pub fn apply(&self) -> anyhow::Result<Applied> {
        let threads = std::fs::read_dir("/proc/self/task")
            .map(|d| d.count())
            .context("counting this process's threads in /proc/self/task")?;
        if threads != 1 {
            bail!(
                "the runtime process has {threads} threads when it confines itself: \
                 capabilities and Landlock would hold for the calling thread only (a bug of \
                 the runtime: nothing may start a thread before confinement)"
            );
        }
        let ruleset = match self.landlock {
            Ok(abi) => Some(self.landlock_ruleset(abi)?),
            Err(_) => None,
        };
        // The bounding set needs CAP_SETPCAP, so it goes first. Without CAP_SETPCAP in the
        // spec's set it stays as the spec made it: no_new_privs and empty permitted and
        // ambient sets already keep an exec from gaining anything.
        let bounding_cleared = match caps::clear(None, caps::CapSet::Bounding) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!("capability bounding set left as the spec set it: {e}");
                false
            }
        };
        caps::clear(None, caps::CapSet::Ambient).context("clearing the ambient capabilities")?;
        let landlock = match ruleset {
            Some((ruleset, rules, abi)) => {
                let status = ruleset.restrict_self().context("landlock_restrict_self")?;
                if status.ruleset == landlock::RulesetStatus::NotEnforced {
                    bail!("the kernel did not enforce the Landlock ruleset (ABI {abi})");
                }
                Some((abi, rules))
            }
            None => {
                // SAFETY: plain prctl.
                if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                    return Err(std::io::Error::last_os_error()).context("setting no_new_privs");
                }
                None
            }
        };
        for set in [
            caps::CapSet::Effective,
            caps::CapSet::Permitted,
            caps::CapSet::Inheritable,
        ] {
            caps::clear(None, set).with_context(|| format!("clearing the {set:?} capabilities"))?;
        }
        let denied_syscalls = load_seccomp()?;
        let applied = Applied {
            landlock,
            bounding_cleared,
            denied_syscalls,
        };
        tracing::debug!(?applied, "runtime process confined");
        Ok(applied)
    }

    /// The Landlock ruleset of the allow-list (created, not yet enforced), its rule count and
    /// the ABI it was made for.
    fn landlock_ruleset(&self, abi: i64) -> anyhow::Result<(landlock::RulesetCreated, usize, i64)> {
        use landlock::{Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI};
        let abi_v = match abi {
            1 => ABI::V1,
            2 => ABI::V2,
            3 => ABI::V3,
            4 => ABI::V4,
            5 => ABI::V5,
            _ => ABI::V6,
        };
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(abi_v))
            .context("Landlock ruleset")?;
        if abi >= 6 {
            ruleset = ruleset
                .scope(Scope::from_all(abi_v))
                .context("Landlock scopes")?;
        }
        let mut created = ruleset.create().context("creating the Landlock ruleset")?;
        let mut rules = 0;
        for allowed in self.allow.allowed_below(&self.root, Path::new("/")) {
            let (path, access) = match &allowed {
                Allowed::Tree(p) => (p, AccessFs::from_all(abi_v)),
                Allowed::File(p) => (p, AccessFs::from_file(abi_v)),
            };
            let host = host_path(&self.root, path);
            let fd = match open_path(&host) {
                Ok(fd) => fd,
                // Gone since it was listed: nothing to allow.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("opening {} for Landlock", host.display()))
                }
            };
            created = created
                .add_rule(landlock::PathBeneath::new(fd, access))
                .with_context(|| format!("Landlock rule for {}", host.display()))?;
            rules += 1;
        }
        Ok((created, rules, abi))
    }
}

/// `path` opened `O_PATH | O_NOFOLLOW` (a rule names what is there, never a link's target).
fn open_path(path: &Path) -> std::io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path and flags that need no mode.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fstat of a descriptor we own into a zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Only directories and regular files get rules: a device node, FIFO or socket of the
    // image is never opened for a guest.
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFDIR && kind != libc::S_IFREG {
        return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    }
    Ok(fd)
}

/// Loads the runtime's seccomp filter on every thread (no_new_privs too); returns how many
/// system calls it denies.
fn load_seccomp() -> anyhow::Result<usize> {
    load_deny_list(&[])
}

/// Loads the deny-list seccomp filter on every thread of the calling process, with
/// no_new_privs: [`DENIED_SYSCALLS`] and `extra` fail with `EPERM`, `clone` with a
/// namespace flag too, `clone3` with `ENOSYS`. The runtime process loads it with nothing
/// extra; other processes that handle untrusted input (the Spin engine's compile helper)
/// add what they never need. Returns how many system calls it denies.
pub fn load_deny_list(extra: &[&str]) -> anyhow::Result<usize> {
    use libseccomp::{ScmpAction, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).context("seccomp filter")?;
    let eperm = ScmpAction::Errno(libc::EPERM);
    let mut denied = 0;
    for name in DENIED_SYSCALLS.iter().chain(extra) {
        // Names this libseccomp does not know (an older one) have nothing to deny.
        let Ok(sc) = ScmpSyscall::from_name(name) else {
            tracing::debug!("seccomp: unknown system call {name}");
            continue;
        };
        f.add_rule(eperm, sc)
            .with_context(|| format!("seccomp rule for {name}"))?;
        denied += 1;
    }
    let clone3 = ScmpSyscall::from_name("clone3").context("seccomp: clone3")?;
    f.add_rule(ScmpAction::Errno(libc::ENOSYS), clone3)
        .context("seccomp rule for clone3")?;
    let clone = ScmpSyscall::from_name("clone").context("seccomp: clone")?;
    for flag in NAMESPACE_FLAGS {
        f.add_rule_conditional(
            eperm,
            clone,
            &[ScmpArgCompare::new(
                0,
                ScmpCompareOp::MaskedEqual(*flag),
                *flag,
            )],
        )
        .context("seccomp rule for clone's namespace flags")?;
    }
    f.set_ctl_nnp(true)?;
    f.set_ctl_tsync(true)?;
    f.load().context("loading the deny-list seccomp filter")?;
    Ok(denied + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/mountinfo` of a Spin container run by `ctr run` on a cgroup v1 host, with a
    /// hostPath volume of the host's /proc at /data/hostproc and a space in a volume's name.
    const MOUNTINFO: &str = "\
1500 1400 0:120 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
1501 1500 0:121 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1502 1500 0:122 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
1503 1502 0:123 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5,mode=620
1504 1502 0:124 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k
1505 1502 0:125 / /dev/mqueue rw,nosuid,nodev,noexec,relatime - mqueue mqueue rw
1506 1500 0:126 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
1507 1506 0:127 / /sys/fs/cgroup rw,nosuid,nodev,noexec - tmpfs tmpfs rw,mode=755
1508 1507 0:33 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
1509 1500 8:1 /var/lib/containerd/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw
1510 1500 0:4 / /data/hostproc rw,relatime - proc proc rw
1511 1500 8:1 /vol /data/my\\040volume rw,relatime - ext4 /dev/vda rw
1512 1500 8:1 /run/spin-shim/x/spin-app /.spin-app ro,relatime - ext4 /dev/vda rw
1513 1501 0:122 /null /proc/kcore rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
";

    fn tree(root: &Path) {
        for d in [
            "bin",
            "etc",
            "proc/self",
            "sys/fs/cgroup/memory",
            "dev/pts",
            "data/hostproc/self",
            "data/my volume/sub",
            "data/app",
            ".spin-app/compiled",
            "tmp",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("app.wasm"), b"\0asm").unwrap();
        std::fs::write(root.join("etc/hosts"), b"127.0.0.1 localhost\n").unwrap();
        std::fs::write(root.join("data/readme.txt"), b"hi").unwrap();
        std::os::unix::fs::symlink("proc", root.join("plink")).unwrap();
        std::os::unix::fs::symlink("hostproc", root.join("data/link")).unwrap();
    }

    #[test]
    fn mountinfo_is_parsed_with_escapes() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 14);
        assert_eq!(m[0].point, PathBuf::from("/"));
        assert_eq!(m[0].fstype, "overlay");
        assert_eq!(m[11].point, PathBuf::from("/data/my volume"));
        assert_eq!(
            (m[10].point.as_path(), m[10].fstype.as_str()),
            (Path::new("/data/hostproc"), "proc")
        );
        assert!(parse_mountinfo("garbage\n\n").is_empty());
    }

    #[test]
    fn allow_list_leaves_out_kernel_filesystems_and_keeps_the_rest() {
        let allow = AllowList::from_mounts(&parse_mountinfo(MOUNTINFO));
        let forbidden: Vec<_> = allow.forbidden().map(Path::to_path_buf).collect();
        assert_eq!(
            forbidden,
            ["/data/hostproc", "/dev", "/proc", "/sys"].map(PathBuf::from)
        );
        let d = tempfile::tempdir().unwrap();
        tree(d.path());
        let got = allow.allowed_below(d.path(), Path::new("/"));
        use Allowed::*;
        let want = vec![
            Tree(PathBuf::from("/.spin-app")),
            Tree(PathBuf::from("/bin")),
            Tree(PathBuf::from("/data/app")),
            Tree(PathBuf::from("/data/my volume")),
            Tree(PathBuf::from("/etc")),
            Tree(PathBuf::from("/tmp")),
            File(PathBuf::from("/app.wasm")),
            File(PathBuf::from("/data/readme.txt")),
        ];
        assert_eq!(got, want);
        // A subtree holding nothing forbidden is allowed whole; a forbidden one is empty.
        assert_eq!(
            allow.allowed_below(d.path(), Path::new("/data/app/../my volume")),
            vec![Tree(PathBuf::from("/data/my volume"))]
        );
        assert!(allow.allowed_below(d.path(), Path::new("/proc")).is_empty());
        assert!(allow.is_forbidden(Path::new("/sys/fs/cgroup/memory/x")));
        assert!(allow.is_forbidden(Path::new("/data/./hostproc/../hostproc/1")));
        assert!(!allow.is_forbidden(Path::new("/data/hostprocx")));
    }

    /// Makes a character device like `/dev/null` (1:3) at `node`, as an image layer would
    /// carry it; false (with a message: the test is skipped) without root.
    fn mknod_null(node: &Path) -> bool {
        let c = std::ffi::CString::new(node.as_os_str().as_bytes()).unwrap();
        // SAFETY: mknod of a path we own; the test runs as root (as the shim does).
        if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } != 0 {
            eprintln!(
                "skipped: mknod needs root ({})",
                std::io::Error::last_os_error()
            );
            return false;
        }
        true
    }

    #[test]
    fn device_nodes_of_the_image_are_forbidden() {
        let d = tempfile::tempdir().unwrap();
        tree(d.path());
        // A character device as an image layer would carry it: /data/app/null (1:3).
        let node = d.path().join("data/app/null");
        if !mknod_null(&node) {
            return;
        }
        let mut allow = AllowList::from_mounts(&parse_mountinfo(MOUNTINFO));
        assert_eq!(allow.forbid_image_devices(d.path(), 10_000), Ok(1));
        assert!(allow.is_forbidden(Path::new("/data/app/null")));
        let got = allow.allowed_below(d.path(), Path::new("/data"));
        assert!(
            !got.contains(&Allowed::Tree(PathBuf::from("/data/app"))),
            "{got:?}"
        );
        assert!(
            got.contains(&Allowed::Tree(PathBuf::from("/data/my volume"))),
            "{got:?}"
        );
        // The bound stops the walk and says so.
        let mut small = AllowList::from_mounts(&[]);
        assert_eq!(small.forbid_image_devices(d.path(), 3), Err(3));
    }

    /// The scan that runs at every start, on an image of [`MAX_SCANNED_ENTRIES`] entries
    /// (1,000 directories of 200 files, a device node last): it finds the node, stops at the
    /// bound one entry later, and its time and memory are printed (run with --nocapture).
    #[test]
    fn device_scan_of_a_big_image_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let (dirs, per_dir) = (1_000, MAX_SCANNED_ENTRIES / 1_000 - 1);
        for i in 0..dirs {
            let dir = d.path().join(format!("d{i:04}"));
            std::fs::create_dir(&dir).unwrap();
            // d0000 gets the device node in place of its last file.
            for j in 0..per_dir - usize::from(i == 0) {
                std::fs::File::create(dir.join(format!("file-{j:03}"))).unwrap();
            }
        }
        let node = d.path().join("d0000/zz-null");
        if !mknod_null(&node) {
            return;
        }
        let entries = dirs + dirs * per_dir;
        assert_eq!(entries, MAX_SCANNED_ENTRIES);
        let hwm = || {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap()
        };
        let before = hwm();
        let t0 = std::time::Instant::now();
        let mut allow = AllowList::from_mounts(&[]);
        assert_eq!(
            allow.forbid_image_devices(d.path(), MAX_SCANNED_ENTRIES),
            Ok(1)
        );
        let took = t0.elapsed();
        assert!(allow.is_forbidden(Path::new("/d0000/zz-null")));
        println!(
            "device scan of {entries} entries: {} ms, peak RSS +{} KiB",
            took.as_millis(),
            hwm().saturating_sub(before)
        );
        // One more entry: the walk stops at the bound and says so.
        std::fs::File::create(d.path().join("one-more")).unwrap();
        let mut allow = AllowList::from_mounts(&[]);
        assert_eq!(
            allow.forbid_image_devices(d.path(), MAX_SCANNED_ENTRIES),
            Err(MAX_SCANNED_ENTRIES)
        );
    }

    #[test]
    fn without_mountinfo_the_fixed_paths_are_still_forbidden() {
        let allow = AllowList::from_mounts(&[]);
        assert!(allow.is_forbidden(Path::new("/proc/self/mem")));
        assert!(allow.is_forbidden(Path::new("/dev/null")));
        assert!(!allow.is_forbidden(Path::new("/etc")));
    }

    #[test]
    fn guest_dirs_and_sources() {
        let d = tempfile::tempdir().unwrap();
        tree(d.path());
        let allow = AllowList::from_mounts(&parse_mountinfo(MOUNTINFO));
        let root = d.path().canonicalize().unwrap();
        let with = Confinement::new(&root, allow.clone(), Ok(7));
        let without = Confinement::new(&root, allow, Err("none".into()));
        assert_eq!(
            with.guest_dirs(Path::new("/"), true),
            vec![(root.clone(), PathBuf::new())]
        );
        // Opened after confinement (a Spin files mount), `/` itself would be refused.
        assert_eq!(with.guest_dirs(Path::new("/"), false).len(), 6);
        let mut dirs = without.guest_dirs(Path::new("/"), true);
        dirs.sort();
        let rels: Vec<_> = dirs.iter().map(|(_, r)| r.clone()).collect();
        assert_eq!(
            rels,
            [
                ".spin-app",
                "bin",
                "data/app",
                "data/my volume",
                "etc",
                "tmp"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(dirs[1].0, root.join("bin"));
        assert_eq!(
            without.guest_dirs(Path::new("/etc"), true),
            vec![(root.join("etc"), PathBuf::new())]
        );
        assert!(without.guest_dirs(Path::new("/dev"), true).is_empty());
        // Sources resolving (through links) to a forbidden path are refused, naming it.
        let e = with
            .check_source(&root.join("plink"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("resolves to /proc"), "{e}");
        let e = with
            .check_source(&root.join("data/link/self"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/data/hostproc/self"), "{e}");
        with.check_source(&root.join("data/app")).unwrap();
        assert!(with.check_source(&root.join("missing")).is_err());
    }
}
