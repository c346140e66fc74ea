//! Device rules on cgroup v2: an eBPF program of type `BPF_PROG_TYPE_CGROUP_DEVICE`
//! attached to the container's cgroup, as runc and crun install.
//!
//! cgroup v2 has no devices controller; the kernel asks the programs attached to a
//! process's cgroup (and its ancestors) before every `mknod`, and every `open` of a
//! device node; one answer of 0 refuses with `EPERM`. The shim builds the program itself
//! from `linux.resources.devices` (raw `bpf(2)`, no libbpf) rather than through youki's
//! `cgroupsv2_devices` feature: youki 0.7's loader first raises `RLIMIT_MEMLOCK` to
//! 128 MiB, soft and hard, and fails the container when it cannot, which is every
//! container on a node whose containerd lacks `CAP_SYS_RESOURCE` under systemd's 8 MiB
//! default (these machines). Since Linux 5.11 BPF memory is charged to the memory cgroup
//! and the rlimit plays no part; on older kernels the load below fails with `EPERM` and
//! says so.
//!
//! The rules are read as youki reads them on cgroup v1 (and as the v1 kernel does): the
//! container's rules in order, then youki's default rules (`/dev/null`, `zero`, `full`,
//! `tty`, `random`, `urandom`, `console`, `pts/*`, `ptmx`, `net/tun`, and `mknod` of any
//! character or block device). Starting from "deny all", an `a` rule resets to deny-all or
//! allow-all, and other rules add an exception or take access away from an identical one;
//! an access is allowed when one exception grants all of it (deny-all base) or when none
//! refuses any of it (allow-all base). So the same spec behaves alike on both layouts.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};

/// Access bits, as in the kernel's `BPF_DEVCG_ACC_*`.
const ACC_MKNOD: u8 = 1;
const ACC_READ: u8 = 2;
const ACC_WRITE: u8 = 4;
const ACC_ALL: u8 = ACC_MKNOD | ACC_READ | ACC_WRITE;

/// Device type, as in the kernel's `BPF_DEVCG_DEV_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A block device (`b`).
    Block = 1,
    /// A character device (`c`, `u`).
    Char = 2,
}

/// One exception of a [`DeviceFilter`]: a device type, a major and minor number (`None`:
/// any) and the access bits it grants (deny-all base) or refuses (allow-all base).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Exception {
    kind: DeviceKind,
    major: Option<u32>,
    minor: Option<u32>,
    access: u8,
}

impl Exception {
    fn covers(&self, kind: DeviceKind, major: u32, minor: u32) -> bool {
        self.kind == kind
            && self.major.is_none_or(|m| m == major)
            && self.minor.is_none_or(|m| m == minor)
    }
}

/// A container's effective device rules (see the module docs), ready to be compiled to
/// a cgroup device program and attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFilter {
    default_allow: bool,
    exceptions: Vec<Exception>,
}

impl DeviceFilter {
    /// The filter for a container with `rules` (its `linux.resources.devices`), followed
    /// by youki's default rules.
    pub fn from_rules(rules: &[LinuxDeviceCgroup]) -> Self {
        let mut f = DeviceFilter {
            default_allow: false,
            exceptions: Vec::new(),
        };
        for r in rules.iter().chain(default_rules().iter()) {
            f.apply(r);
        }
        f
    }

    fn apply(&mut self, rule: &LinuxDeviceCgroup) {
        let kind = match rule.typ().unwrap_or(LinuxDeviceType::A) {
            LinuxDeviceType::A => {
                // As the v1 kernel: `a` drops every exception and sets the base.
                self.default_allow = rule.allow();
                self.exceptions.clear();
                return;
            }
            LinuxDeviceType::B => DeviceKind::Block,
            LinuxDeviceType::C | LinuxDeviceType::U => DeviceKind::Char,
            // FIFOs are not device nodes: the kernel never asks about them.
            LinuxDeviceType::P => return,
        };
        let access = parse_access(rule.access().as_deref());
        let ex = Exception {
            kind,
            major: rule.major().and_then(|m| u32::try_from(m).ok()),
            minor: rule.minor().and_then(|m| u32::try_from(m).ok()),
            access,
        };
        if rule.allow() != self.default_allow {
            // An exception to the base: add it, or widen an identical one.
            match self.exceptions.iter_mut().find(|e| same_device(e, &ex)) {
                Some(e) => e.access |= ex.access,
                None => self.exceptions.push(ex),
            }
        } else {
            // Agrees with the base: take its access away from an identical exception.
            for e in self.exceptions.iter_mut().filter(|e| same_device(e, &ex)) {
                e.access &= !ex.access;
            }
            self.exceptions.retain(|e| e.access != 0);
        }
    }

    /// Whether the filter lets a process `mknod`/open (`access`: any of `r`, `w`, `m`)
    /// device `kind` `major:minor`.
    pub fn allows(&self, kind: DeviceKind, major: u32, minor: u32, access: &str) -> bool {
        let access = parse_access(Some(access));
        let mut matching = self
            .exceptions
            .iter()
            .filter(|e| e.covers(kind, major, minor));
        if self.default_allow {
            !matching.any(|e| e.access & access != 0)
        } else {
            matching.any(|e| access & !e.access == 0)
        }
    }

    /// The filter as eBPF instructions for `BPF_PROG_TYPE_CGROUP_DEVICE` (little-endian
    /// `struct bpf_insn` words): the first exception that matches decides, else the base.
    pub fn program(&self) -> Vec<u64> {
        // r2 = ctx->access_type; r3 = type (low 16 bits); r4 = access (high 16 bits)
        // r5 = ctx->major; r6 = ctx->minor
        let mut p = vec![
            insn(LDX_W, 2, 1, 0, 0),
            insn(MOV64_X, 3, 2, 0, 0),
            insn(AND64_K, 3, 0, 0, 0xffff),
            insn(MOV64_X, 4, 2, 0, 0),
            insn(RSH64_K, 4, 0, 0, 16),
            insn(LDX_W, 5, 1, 4, 0),
            insn(LDX_W, 6, 1, 8, 0),
        ];
        let verdict = i32::from(!self.default_allow);
        for e in &self.exceptions {
            // (code, dst, src, imm); each jump is `goto next exception`, its offset set below.
            let mut block: Vec<(u8, u8, u8, i32)> = vec![(JNE_K, 3, 0, e.kind as i32)];
            block.push((MOV64_X, 7, 4, 0));
            if self.default_allow {
                // Refuses when the access asks for any bit the exception names.
                block.push((AND64_K, 7, 0, i32::from(e.access)));
                block.push((JEQ_K, 7, 0, 0));
            } else {
                // Grants when the access asks for no bit outside the exception.
                block.push((AND64_K, 7, 0, i32::from(ACC_ALL & !e.access)));
                block.push((JNE_K, 7, 0, 0));
            }
            if let Some(m) = e.major {
                block.push((JNE_K, 5, 0, m as i32));
            }
            if let Some(m) = e.minor {
                block.push((JNE_K, 6, 0, m as i32));
            }
            block.push((MOV64_K, 0, 0, verdict));
            block.push((EXIT, 0, 0, 0));
            let len = block.len();
            for (i, (code, dst, src, imm)) in block.into_iter().enumerate() {
                let off = match code {
                    JNE_K | JEQ_K => (len - i - 1) as i16,
                    _ => 0,
                };
                p.push(insn(code, dst, src, off, imm));
            }
        }
        p.push(insn(MOV64_K, 0, 0, 0, i32::from(self.default_allow)));
        p.push(insn(EXIT, 0, 0, 0, 0));
        p
    }

    /// Loads the program into the kernel.
    pub fn load(&self) -> Result<OwnedFd, String> {
        load_program(&self.program())
    }

    /// Loads the program and attaches it to the cgroup directory `cgroup` (with
    /// `BPF_F_ALLOW_MULTI`, so it adds to programs already attached there, such as
    /// systemd's, and to those of the parents: every one must allow an access). The
    /// attachment lives as long as the cgroup.
    pub fn attach(&self, cgroup: &Path) -> Result<(), String> {
        let prog = self.load()?;
        let dir = std::fs::File::open(cgroup)
            .map_err(|e| format!("opening cgroup {}: {e}", cgroup.display()))?;
        #[repr(C)]
        #[derive(Default)]
        struct ProgAttach {
            target_fd: u32,
            attach_bpf_fd: u32,
            attach_type: u32,
            attach_flags: u32,
            replace_bpf_fd: u32,
            pad: [u32; 11],
        }
        let attr = ProgAttach {
            target_fd: dir.as_raw_fd() as u32,
            attach_bpf_fd: prog.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: BPF_F_ALLOW_MULTI,
            ..Default::default()
        };
        // SAFETY: bpf(2) reads `size_of::<ProgAttach>()` bytes of `attr`; both descriptors
        // stay open for the call.
        let rc = unsafe { bpf(BPF_PROG_ATTACH, &attr) };
        if rc < 0 {
            return Err(format!(
                "attaching the device filter to {}: {}",
                cgroup.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }
}

/// `r`, `w`, `m` letters to access bits; none (or absent) means all three, as in runc.
fn parse_access(access: Option<&str>) -> u8 {
    let bits = access.unwrap_or("").chars().fold(0, |b, c| match c {
        'r' => b | ACC_READ,
        'w' => b | ACC_WRITE,
        'm' => b | ACC_MKNOD,
        _ => b,
    });
    if bits == 0 {
        ACC_ALL
    } else {
        bits
    }
}

fn same_device(a: &Exception, b: &Exception) -> bool {
    a.kind == b.kind && a.major == b.major && a.minor == b.minor
}

/// youki 0.7's default device rules (libcgroups `default_devices` then
/// `default_allow_devices`), which it adds after the container's own on cgroup v1.
fn default_rules() -> Vec<LinuxDeviceCgroup> {
    let rule = |typ, major: Option<i64>, minor: Option<i64>, access: &str| {
        let mut r = LinuxDeviceCgroup::default();
        r.set_allow(true);
        r.set_typ(Some(typ));
        r.set_major(major);
        r.set_minor(minor);
        r.set_access(Some(access.to_string()));
        r
    };
    use LinuxDeviceType::{B, C};
    vec![
        rule(C, Some(1), Some(3), "rwm"),    // /dev/null
        rule(C, Some(1), Some(5), "rwm"),    // /dev/zero
        rule(C, Some(1), Some(7), "rwm"),    // /dev/full
        rule(C, Some(5), Some(0), "rwm"),    // /dev/tty
        rule(C, Some(1), Some(9), "rwm"),    // /dev/urandom
        rule(C, Some(1), Some(8), "rwm"),    // /dev/random
        rule(C, None, None, "m"),            // mknod of any character device
        rule(B, None, None, "m"),            // mknod of any block device
        rule(C, Some(5), Some(1), "rwm"),    // /dev/console
        rule(C, Some(136), None, "rwm"),     // /dev/pts/*
        rule(C, Some(5), Some(2), "rwm"),    // /dev/ptmx
        rule(C, Some(10), Some(200), "rwm"), // /dev/net/tun
    ]
}

// bpf(2) commands, program and attach types, flags (linux/bpf.h).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

// Instruction opcodes (linux/bpf_common.h, linux/bpf.h).
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const AND64_K: u8 = 0x57; // BPF_ALU64 | BPF_AND | BPF_K
const RSH64_K: u8 = 0x77; // BPF_ALU64 | BPF_RSH | BPF_K
const JEQ_K: u8 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

/// One `struct bpf_insn` (code, dst_reg:4 / src_reg:4, off, imm) as its little-endian
/// 64-bit word.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | (u64::from((dst & 0xf) | (src << 4)) << 8)
        | (u64::from(off as u16) << 16)
        | (u64::from(imm as u32) << 32)
}

/// bpf(2) with `attr` of its own size.
///
/// # Safety
/// `attr` must be a valid `union bpf_attr` prefix for `cmd` whose pointers are live.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &T) -> libc::c_long {
    libc::syscall(
        libc::SYS_bpf,
        cmd,
        attr as *const T,
        std::mem::size_of::<T>() as u32,
    )
}

fn load_program(insns: &[u64]) -> Result<OwnedFd, String> {
    #[cfg(not(target_endian = "little"))]
    compile_error!("the device program is encoded for little-endian machines");
    let license = b"Apache\0";
    // The leading fields of the kernel's `union bpf_attr` for BPF_PROG_LOAD.
    #[repr(C)]
    #[derive(Default)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        pad: [u64; 8],
    }
    let mut log = vec![0u8; 64 << 10];
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: the instruction and license buffers outlive the call.
    let mut fd = unsafe { bpf(BPF_PROG_LOAD, &attr) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        // Once more with the verifier's log, for the message.
        attr.log_level = 1;
        attr.log_size = log.len() as u32;
        attr.log_buf = log.as_mut_ptr() as u64;
        // SAFETY: as above; the log buffer outlives the call too.
        fd = unsafe { bpf(BPF_PROG_LOAD, &attr) };
        if fd < 0 {
            let text = String::from_utf8_lossy(&log);
            let last = text
                .trim_end_matches('\0')
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .map(|l| format!(" (verifier: {l})"))
                .unwrap_or_default();
            return Err(format!(
                "the kernel refused a cgroup device program: {err}{last}"
            ));
        }
    }
    // SAFETY: `fd` is the descriptor bpf(2) just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Why this node cannot enforce device rules on cgroup v2, or `Ok` when the kernel
/// accepts the program of a container with containerd's default rules (what the shim
/// attaches at every Create on a cgroup v2 host).
pub fn device_filter_support() -> Result<(), String> {
    let mut deny_all = LinuxDeviceCgroup::default();
    deny_all.set_allow(false);
    deny_all.set_access(Some("rwm".into()));
    DeviceFilter::from_rules(&[deny_all]).load().map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        allow: bool,
        typ: LinuxDeviceType,
        major: Option<i64>,
        minor: Option<i64>,
        access: &str,
    ) -> LinuxDeviceCgroup {
        let mut r = LinuxDeviceCgroup::default();
        r.set_allow(allow);
        r.set_typ(Some(typ));
        r.set_major(major);
        r.set_minor(minor);
        r.set_access(Some(access.to_string()));
        r
    }

    use DeviceKind::{Block, Char};
    use LinuxDeviceType::{A, B};

    /// containerd's default: deny all, then the defaults. Disks are refused, pseudo
    /// devices and mknod are allowed.
    #[test]
    fn containerd_default_denies_disks() {
        let f = DeviceFilter::from_rules(&[rule(false, A, None, None, "rwm")]);
        assert!(!f.allows(Block, 254, 0, "r"));
        assert!(!f.allows(Block, 8, 0, "rw"));
        assert!(f.allows(Block, 8, 0, "m"));
        assert!(!f.allows(Block, 8, 0, "mr"));
        assert!(f.allows(Char, 1, 3, "rw"));
        assert!(f.allows(Char, 136, 4, "rw"));
        assert!(!f.allows(Char, 1, 1, "r"), "/dev/mem");
        assert!(!f.allows(Char, 10, 229, "rw"), "/dev/fuse");
    }

    /// A device the spec allows (`ctr run --device /dev/vda`), read only.
    #[test]
    fn spec_allow_rule_grants_only_its_access() {
        let f = DeviceFilter::from_rules(&[
            rule(false, A, None, None, "rwm"),
            rule(true, B, Some(254), Some(0), "r"),
        ]);
        assert!(f.allows(Block, 254, 0, "r"));
        assert!(!f.allows(Block, 254, 0, "rw"));
        assert!(!f.allows(Block, 254, 1, "r"));
    }

    /// Privileged (`a` allow) allows everything; a later deny takes access away; a deny
    /// after an allow of the same device removes it again; a later `a` deny resets.
    #[test]
    fn v1_semantics_of_later_rules() {
        let all = DeviceFilter::from_rules(&[rule(true, A, None, None, "rwm")]);
        assert!(all.allows(Block, 254, 0, "rwm"));
        let f = DeviceFilter::from_rules(&[
            rule(true, A, None, None, "rwm"),
            rule(false, B, Some(254), None, "w"),
        ]);
        assert!(f.allows(Block, 254, 0, "r"));
        assert!(!f.allows(Block, 254, 0, "rw"));
        assert!(f.allows(Block, 8, 0, "rw"));
        let f = DeviceFilter::from_rules(&[
            rule(false, A, None, None, "rwm"),
            rule(true, B, Some(8), Some(0), "rw"),
            rule(false, B, Some(8), Some(0), "w"),
        ]);
        assert!(f.allows(Block, 8, 0, "r"));
        assert!(!f.allows(Block, 8, 0, "w"));
        let f = DeviceFilter::from_rules(&[
            rule(true, B, Some(8), Some(0), "rw"),
            rule(false, A, None, None, "rwm"),
        ]);
        assert!(!f.allows(Block, 8, 0, "r"));
        assert!(
            f.allows(Char, 1, 3, "r"),
            "defaults come after the spec's rules"
        );
    }

    #[test]
    fn encoding_matches_struct_bpf_insn() {
        // r2 = *(u32 *)(r1 + 4): code 0x61, dst 2, src 1, off 4.
        assert_eq!(
            insn(LDX_W, 2, 1, 4, 0).to_le_bytes(),
            [0x61, 0x12, 4, 0, 0, 0, 0, 0]
        );
        // if r3 != 0x1234 goto +3
        assert_eq!(
            insn(JNE_K, 3, 0, 3, 0x1234).to_le_bytes(),
            [0x55, 0x03, 3, 0, 0x34, 0x12, 0, 0]
        );
    }

    /// The kernel's verifier accepts the programs of every rule shape above (root only).
    #[test]
    fn kernel_accepts_programs() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        device_filter_support().unwrap();
        for rules in [
            vec![rule(true, A, None, None, "rwm")],
            vec![
                rule(true, A, None, None, "rwm"),
                rule(false, B, Some(254), None, "w"),
            ],
            vec![
                rule(false, A, None, None, "rwm"),
                rule(true, B, Some(254), Some(0), "r"),
            ],
        ] {
            DeviceFilter::from_rules(&rules).load().unwrap();
        }
    }
}
