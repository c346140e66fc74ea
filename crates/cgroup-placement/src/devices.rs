//! Whether this node can enforce device rules on cgroup v2, where they are an eBPF
//! program of type `BPF_PROG_TYPE_CGROUP_DEVICE` attached to the container's cgroup.
//!
//! youki 0.7's loader (libcgroups feature `cgroupsv2_devices`) first raises
//! `RLIMIT_MEMLOCK` to 128 MiB (soft and hard) and fails the container when it cannot, so
//! the probe checks that precondition as well as the kernel's acceptance of a program.

/// `RLIMIT_MEMLOCK` youki 0.7 sets before loading its device program.
pub const YOUKI_MEMLOCK: u64 = 128 << 20;

/// Why device rules cannot be enforced on cgroup v2 here, or `Ok` when a device program
/// loads and youki's memlock step would succeed.
pub fn device_filter_support() -> Result<(), String> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return Err(format!(
            "cannot read RLIMIT_MEMLOCK: {}",
            std::io::Error::last_os_error()
        ));
    }
    if rl.rlim_max != libc::RLIM_INFINITY && rl.rlim_max < YOUKI_MEMLOCK && !has_sys_resource() {
        return Err(format!(
            "the device filter loader raises RLIMIT_MEMLOCK to {YOUKI_MEMLOCK} bytes, but its \
             hard limit is {} bytes and this process lacks CAP_SYS_RESOURCE to raise it (run \
             containerd with LimitMEMLOCK=infinity or with CAP_SYS_RESOURCE)",
            rl.rlim_max
        ));
    }
    load_allow_all()
}

/// Capability number of `CAP_SYS_RESOURCE` (linux/capability.h).
const CAP_SYS_RESOURCE: u32 = 24;

fn has_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// Loads (and closes) `r0 = 1; exit`, a device program allowing everything.
fn load_allow_all() -> Result<(), String> {
    // BPF_ALU64|BPF_MOV|BPF_K r0, 1 ; BPF_JMP|BPF_EXIT
    let insns: [u64; 2] = [
        u64::from_le_bytes([0xb7, 0, 0, 0, 1, 0, 0, 0]),
        u64::from_le_bytes([0x95, 0, 0, 0, 0, 0, 0, 0]),
    ];
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
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: bpf(2) reads `size_of::<ProgLoad>()` bytes of `attr`, which outlives the call
    // as do the instruction and license buffers it points to.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoad,
            std::mem::size_of::<ProgLoad>() as u32,
        )
    };
    if fd < 0 {
        return Err(format!(
            "the kernel refused a cgroup device program: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` is the descriptor bpf(2) just returned to us.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel accepts the probe program (root here), and the memlock precondition is
    /// reported exactly when youki's loader would fail on it.
    #[test]
    fn probe_matches_this_node() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        load_allow_all().unwrap();
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we pass.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) }, 0);
        let blocked = rl.rlim_max != libc::RLIM_INFINITY
            && rl.rlim_max < YOUKI_MEMLOCK
            && !has_sys_resource();
        match device_filter_support() {
            Ok(()) => assert!(!blocked),
            Err(e) => {
                assert!(blocked, "{e}");
                assert!(
                    e.contains("CAP_SYS_RESOURCE") && e.contains("RLIMIT_MEMLOCK"),
                    "{e}"
                );
            }
        }
    }
}
