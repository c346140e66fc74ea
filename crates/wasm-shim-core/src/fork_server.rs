//! The fork server: starts the container-creation helpers ([`crate::zygote`]) by fork
//! instead of exec, so that a pod's shim server, its helper and its containers share one
//! copy of the shim binary's relocated data.
//!
//! The position-independent shim binary has about 3 MiB of data that the dynamic loader
//! relocates when the binary starts (vtables and pointer tables of wasmtime and its
//! dependencies). Each exec of the binary makes a private copy of it, shared only by the
//! processes forked from that exec. With an exec'd helper, whose containers are its clones,
//! a pod held two copies: the server's and the helper's.
//!
//! The fork server is forked from the server first thing, while the server is still
//! single-threaded, and it stays single-threaded. So a helper forked from it is as sound a
//! parent for libcontainer's clones as a fresh exec, and what the server had relocated is
//! shared, copy-on-write, by the server, the fork server, the helpers and every container
//! they create. Address-space randomisation is unchanged: the pod's processes share the
//! layout chosen at the server's exec, as a helper and its containers already did.
//!
//! The fork server keeps no descriptor of the server's but its own socket, and no
//! environment: its environment block is zeroed in memory, so `/proc/<pid>/environ` of a
//! helper or a Wasm container shows none of the server's variables (an exec'd helper
//! started with an empty environment for the same reason). It serves one request, "start
//! a helper on this socket, logging to this descriptor": it clones the helper with
//! `clone3(CLONE_PARENT | CLONE_PIDFD)`, so the helper is the server's child like an
//! exec'd one (the server reaps it, and the containers the helper creates as its siblings
//! are the server's children too), and sends back the helper's pid and pidfd. If the fork
//! server fails or is gone, the server goes back to exec'ing helpers.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use nix::sys::socket::{
    self, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

use crate::executor::ShimExecutor;
use crate::{fds, zygote};

/// The argument `ps` shows for the fork server (it is never parsed: the process is forked,
/// not exec'd).
pub const FORK_SERVER_ARG: &str = "--container-creation-fork-server";

/// The one variable the fork server keeps: the shim binary sets it for itself before the
/// server starts (an exec'd helper sets it again), and it holds no secret.
const KEPT_ENV: &str = "RUST_LIB_BACKTRACE";

/// How long the server waits for the fork server to answer one request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's handle on its fork server. Dropping it ends the fork server.
pub struct ForkServer {
    sock: OwnedFd,
    pid: i32,
    pidfd: OwnedFd,
}

impl ForkServer {
    /// Forks the fork server. Call it first thing in the server: it is refused, naming the
    /// number of threads, once this process runs more than one.
    pub fn start(executor: ShimExecutor) -> anyhow::Result<ForkServer> {
        let threads = std::fs::read_dir("/proc/self/task")
            .context("counting the server's threads")?
            .count();
        if threads != 1 {
            bail!("the server already runs {threads} threads, so a fork of it is not sound");
        }
        let (ours, theirs) = socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .context("socketpair for the fork server")?;
        let server = std::process::id() as i32;
        // SAFETY: this process is single-threaded (checked above), so the child may run
        // any code.
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()).context("fork of the fork server"),
            0 => {
                drop(ours);
                serve(theirs, server, executor)
            }
            pid => {
                drop(theirs);
                // No reaper runs yet (no thread, no SIGCHLD handler): the pid is the child's.
                let pidfd = fds::pidfd_open(pid).context("pidfd_open of the fork server")?;
                Ok(ForkServer {
                    sock: ours,
                    pid,
                    pidfd,
                })
            }
        }
    }

    /// Starts a helper serving `helper_sock`, with `stderr` as its stderr (else /dev/null):
    /// the helper's pid and a pidfd of it.
    pub fn spawn(
        &self,
        helper_sock: OwnedFd,
        stderr: Option<BorrowedFd<'_>>,
    ) -> anyhow::Result<(i32, OwnedFd)> {
        let mut fds = vec![helper_sock.as_raw_fd()];
        fds.extend(stderr.map(|e| e.as_raw_fd()));
        socket::sendmsg::<()>(
            self.sock.as_raw_fd(),
            &[IoSlice::new(b"h")],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .context("sending a request to the fork server")?;
        drop(helper_sock);
        let ms = REPLY_TIMEOUT.as_millis() as libc::c_int;
        let answered = fds::poll_readable(&[self.sock.as_fd()], ms)
            .with_context(|| format!("waiting for the fork server's (pid {}) reply", self.pid))?;
        if !answered[0] {
            bail!(
                "the fork server (pid {}) did not answer within {} s",
                self.pid,
                REPLY_TIMEOUT.as_secs()
            );
        }
        let (bytes, reply, mut fds) = recv_with_fds(self.sock.as_fd())?;
        if bytes == 0 {
            bail!("the fork server (pid {}) is gone", self.pid);
        }
        let code = i32::from_le_bytes(reply);
        if code < 0 {
            return Err(std::io::Error::from_raw_os_error(-code))
                .context("clone3 of a container-creation helper in the fork server");
        }
        let pidfd = fds
            .pop()
            .ok_or_else(|| anyhow!("the fork server sent helper pid {code} without its pidfd"))?;
        Ok((code, pidfd))
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        let _ = fds::pidfd_signal(self.pidfd.as_fd(), libc::SIGKILL);
    }
}

/// One message of up to four bytes and up to two descriptors (close-on-exec).
fn recv_with_fds(sock: BorrowedFd<'_>) -> anyhow::Result<(usize, [u8; 4], Vec<OwnedFd>)> {
    let mut buf = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let (bytes, fds) = loop {
        match socket::recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut fds = Vec::new();
                for c in msg.cmsgs()? {
                    if let ControlMessageOwned::ScmRights(rights) = c {
                        // SAFETY: descriptors just received, owned by nobody else.
                        fds.extend(
                            rights
                                .into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                break (msg.bytes, fds);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    Ok((bytes, buf, fds))
}

/// The fork server's life: requests until the server closes its socket or dies.
fn serve(sock: OwnedFd, server: i32, executor: ShimExecutor) -> ! {
    die_with(server);
    let sock = keep_only(sock);
    forget_environment();
    set_cmdline(&[FORK_SERVER_ARG]);
    loop {
        let Ok((bytes, _, fds)) = recv_with_fds(sock.as_fd()) else {
            exit(1)
        };
        if bytes == 0 {
            exit(0)
        }
        let (code, pidfd) = match fds.first() {
            Some(helper_sock) => match clone_helper(helper_sock, fds.get(1), server, &executor) {
                Ok((pid, pidfd)) => (pid, Some(pidfd)),
                Err(errno) => (-errno, None),
            },
            None => (-libc::EINVAL, None),
        };
        let raw: Vec<RawFd> = pidfd.iter().map(|fd| fd.as_raw_fd()).collect();
        let cmsgs: Vec<ControlMessage<'_>> = if raw.is_empty() {
            Vec::new()
        } else {
            vec![ControlMessage::ScmRights(&raw)]
        };
        let sent = socket::sendmsg::<()>(
            sock.as_raw_fd(),
            &[IoSlice::new(&code.to_le_bytes())],
            &cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        );
        if sent.is_err() {
            exit(1)
        }
    }
}

fn exit(code: libc::c_int) -> ! {
    // SAFETY: _exit ends this process without running the server's exit handlers.
    unsafe { libc::_exit(code) }
}

/// SIGKILL when `parent` dies; ends now if it already did.
fn die_with(parent: i32) {
    // SAFETY: plain prctl and getppid.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
}

/// Moves `sock` to descriptor 3, closes every other descriptor above it and gives 0, 1 and
/// 2 to /dev/null: the fork server keeps nothing of the server's.
fn keep_only(sock: OwnedFd) -> OwnedFd {
    const SOCK: RawFd = 3;
    let fd = sock.into_raw_fd();
    if fds::keep_only(fd, SOCK).is_err() {
        exit(1)
    }
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        // SAFETY: dup2 onto the standard descriptors.
        unsafe {
            for std_fd in 0..3 {
                libc::dup2(null.as_raw_fd(), std_fd);
            }
        }
    }
    // SAFETY: descriptor 3 now holds the socket and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(SOCK) }
}

/// The `/proc/self/stat` fields `first..=last` (numbered as in proc(5)) as addresses.
fn stat_addresses(first: usize, last: usize) -> Option<Vec<usize>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command start at field 3.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    (first..=last)
        .map(|n| fields.get(n - 3)?.parse().ok())
        .collect()
}

/// Empties the environment (but for [`KEPT_ENV`]), and zeroes the block the kernel shows as
/// `/proc/<pid>/environ` (then shrinks it to nothing where this process may). No value is
/// copied on the way: this process's memory is what every helper and container starts with.
fn forget_environment() {
    let kept = std::env::var_os(KEPT_ENV);
    // SAFETY: single-threaded; clearenv only drops the environment's pointers.
    unsafe { libc::clearenv() };
    if let Some(v) = kept {
        std::env::set_var(KEPT_ENV, v);
    }
    let Some(range) = stat_addresses(50, 51) else {
        return;
    };
    let (start, end) = (range[0], range[1]);
    if start == 0 || end <= start {
        return;
    }
    // SAFETY: [env_start, env_end) is this process's own environment block (on its stack);
    // nothing points into it any more (the environment was just emptied).
    unsafe {
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
        libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_ENV_END, start, 0, 0);
    }
}

/// Makes `/proc/<pid>/cmdline` read `<argv[0]> <args...>`: written over the argument block
/// when it fits (it always does for a server containerd started), else a new block set
/// with prctl where this process may.
fn set_cmdline(args: &[&str]) {
    let Some(range) = stat_addresses(48, 49) else {
        return;
    };
    let (start, end) = (range[0], range[1]);
    if start == 0 || end <= start {
        return;
    }
    // SAFETY: [arg_start, arg_end) is this process's own argument block.
    let block = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    let argv0_len = block.iter().position(|b| *b == 0).unwrap_or(block.len());
    let mut line = block[..argv0_len].to_vec();
    for a in args {
        line.push(0);
        line.extend_from_slice(a.as_bytes());
    }
    line.push(0);
    if line.len() <= block.len() {
        block[..line.len()].copy_from_slice(&line);
        block[line.len()..].fill(0);
        // SAFETY: plain prctl; the new end lies within the old block.
        unsafe {
            libc::prctl(
                libc::PR_SET_MM,
                libc::PR_SET_MM_ARG_END,
                start + line.len(),
                0,
                0,
            )
        };
    } else {
        let new = line.leak();
        let (s, e) = (new.as_ptr() as usize, new.as_ptr() as usize + new.len());
        // SAFETY: plain prctl pointing at memory that lives as long as the process.
        unsafe {
            libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_ARG_START, s, 0, 0);
            libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_ARG_END, e, 0, 0);
        }
    }
}

/// `struct clone_args` up to `tls` (CLONE_ARGS_SIZE_VER0).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
}

/// Clones a helper as the server's child (`CLONE_PARENT`): its pid and pidfd, or an errno.
/// Called in the single-threaded fork server, so the child may run any code, as
/// libcontainer's own clone3 children do.
fn clone_helper(
    sock: &OwnedFd,
    stderr: Option<&OwnedFd>,
    server: i32,
    executor: &ShimExecutor,
) -> Result<(i32, OwnedFd), i32> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: (libc::CLONE_PARENT | libc::CLONE_PIDFD) as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        ..Default::default()
    };
    // SAFETY: clone3 with a valid clone_args of the size given and no CLONE_VM: a fork
    // whose child's parent is the server.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        -1 => Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)),
        0 => helper(sock, stderr, server, executor.clone()),
        pid => {
            // SAFETY: clone3 stored a fresh descriptor owned by nobody else.
            Ok((pid as i32, unsafe { OwnedFd::from_raw_fd(pidfd) }))
        }
    }
}

/// The cloned helper: its socket as stdin and its log as stderr, as an exec'd helper has
/// them, then [`zygote::helper_main`].
fn helper(sock: &OwnedFd, stderr: Option<&OwnedFd>, server: i32, executor: ShimExecutor) -> ! {
    die_with(server);
    // SAFETY: dup2 of descriptors this process owns onto the standard ones.
    unsafe {
        if libc::dup2(sock.as_raw_fd(), 0) != 0 {
            libc::_exit(1);
        }
        if let Some(e) = stderr {
            libc::dup2(e.as_raw_fd(), 2);
        }
    }
    set_cmdline(&[zygote::HELPER_ARG]);
    zygote::helper_main(executor)
}
