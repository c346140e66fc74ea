//! A process confined as the compile helper confines itself
//! (`spin_engine::compile_helper::confine`) cannot signal or trace a process outside it,
//! even one of its own uid (65534, like every pod's helpers): not from the supervisor (in
//! the host's PID namespace: the seccomp deny-list refuses `kill`, `ptrace`, `pidfd_open`),
//! nor from the worker it forks (PID 1 of its own PID namespace: `tgkill`, which `abort`
//! needs and the filter allows, finds no such process).
//!
//! `harness = false`: the confinement needs a single-threaded process, so `main` re-executes
//! this binary as the probe. Needs root (as the shim); skipped with a message otherwise.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

const PROBE_ENV: &str = "HELPER_CONFINEMENT_PROBE";
const ROOT_ENV: &str = "HELPER_CONFINEMENT_ROOT";
const NOBODY: u32 = 65534;

fn errno_of(r: libc::c_long) -> i32 {
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

/// The probe: confine, then try to reach `target` from the supervisor and from a worker.
fn probe(target: i32, root: &str) -> i32 {
    let dir = std::os::fd::IntoRawFd::into_raw_fd(std::fs::File::open(root).expect("open root"));
    if dir != 3 {
        // SAFETY: dup2 of a descriptor we own onto 3, where the helper expects its root.
        assert!(unsafe { libc::dup2(dir, 3) } == 3);
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(dir) };
    }
    if let Err(e) = spin_engine::compile_helper::confine() {
        println!("confine-error={e:#}");
        return 1;
    }
    // SAFETY: plain system calls on a pid, no pointers.
    let (kill0, kill9, ptrace, pidfd) = unsafe {
        (
            errno_of(libc::kill(target, 0) as libc::c_long),
            errno_of(libc::kill(target, libc::SIGKILL) as libc::c_long),
            errno_of(libc::ptrace(libc::PTRACE_ATTACH, target, 0, 0)),
            {
                let fd = libc::syscall(libc::SYS_pidfd_open, target, 0);
                if fd >= 0 {
                    0
                } else {
                    errno_of(-1)
                }
            },
        )
    };
    println!("supervisor kill0={kill0} kill9={kill9} ptrace={ptrace} pidfd_open={pidfd}");
    // SAFETY: this process is single-threaded (a fresh exec that started no thread).
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: as above; the worker then exits.
            let (pid, kill9, ptrace, tgkill) = unsafe {
                (
                    libc::getpid(),
                    errno_of(libc::kill(target, libc::SIGKILL) as libc::c_long),
                    errno_of(libc::ptrace(libc::PTRACE_ATTACH, target, 0, 0)),
                    errno_of(libc::syscall(
                        libc::SYS_tgkill,
                        target,
                        target,
                        libc::SIGKILL,
                    )),
                )
            };
            println!("worker pid={pid} kill9={kill9} ptrace={ptrace} tgkill={tgkill}");
            std::process::exit(0)
        }
        child if child > 0 => {
            let mut status = 0;
            // SAFETY: waitpid of our child into a local.
            unsafe { libc::waitpid(child, &mut status, 0) };
            0
        }
        _ => {
            println!("fork-error={}", std::io::Error::last_os_error());
            1
        }
    }
}

fn main() {
    if let Ok(target) = std::env::var(PROBE_ENV) {
        let root = std::env::var(ROOT_ENV).expect("root dir");
        std::process::exit(probe(target.parse().expect("pid"), &root));
    }
    if !nix_is_root() {
        eprintln!("helper_confinement: skipped (needs root, as the shim)");
        return;
    }
    // Another process of the helpers' uid, outside them: another pod's helper stand-in.
    let mut target = Command::new("sleep")
        .arg("120")
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .expect("start sleep as 65534");
    let pid = target.id() as i32;
    let result = std::panic::catch_unwind(|| {
        // Control: an unconfined process of that uid may signal it.
        let control = Command::new("sh")
            .args(["-c", &format!("kill -0 {pid}")])
            .uid(NOBODY)
            .gid(NOBODY)
            .status()
            .expect("sh");
        assert!(control.success(), "control: uid 65534 cannot signal {pid}");
        let root = tempfile::tempdir().expect("tempdir");
        let out = Command::new(std::env::current_exe().expect("current exe"))
            .env(PROBE_ENV, pid.to_string())
            .env(ROOT_ENV, root.path())
            .output()
            .expect("run the probe");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("{stdout}");
        assert!(
            out.status.success(),
            "probe failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let eperm = libc::EPERM;
        assert!(
            stdout.contains(&format!(
                "supervisor kill0={eperm} kill9={eperm} ptrace={eperm} pidfd_open={eperm}"
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "worker pid=1 kill9={eperm} ptrace={eperm} tgkill={}",
                libc::ESRCH
            )),
            "{stdout}"
        );
    });
    // The target outlived every attempt.
    let alive = target.try_wait().expect("try_wait").is_none();
    let _ = target.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while target.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(
        alive,
        "the outside process was killed from the helper context"
    );
    println!("helper_confinement: ok");
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
