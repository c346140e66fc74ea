//! Process descriptors (pidfds), and the descriptor table of a process the server starts.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A pidfd of process `pid` (`pidfd_open(2)`).
pub fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `signal` to the process `pidfd` refers to (`pidfd_send_signal(2)`); unlike a pid, a
/// pidfd never names another process.
pub fn pidfd_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> std::io::Result<()> {
    // SAFETY: pidfd_send_signal on a descriptor we hold, no siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Moves descriptor `from` to `to` (close-on-exec) and closes every descriptor above `to`:
/// what a process forked or exec'd by the server keeps of the server's is then the standard
/// descriptors and `to`.
pub fn keep_only(from: RawFd, to: RawFd) -> std::io::Result<()> {
    // SAFETY: dup2/fcntl/close_range on descriptors this process owns. close_range(2) by
    // its syscall number: musl's libc (the static release build) has no wrapper for it.
    let ok = unsafe {
        (from == to || libc::dup2(from, to) == to)
            && libc::fcntl(to, libc::F_SETFD, libc::FD_CLOEXEC) == 0
            && libc::syscall(
                libc::SYS_close_range,
                to as libc::c_uint + 1,
                libc::c_uint::MAX,
                0 as libc::c_uint,
            ) == 0
    };
    if !ok {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `poll(2)` of `fds` with their events for up to `ms` ms (retried on EINTR): which got any.
pub(crate) fn poll(fds: &[(BorrowedFd<'_>, libc::c_short)], ms: i32) -> std::io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, events)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: *events,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: pfds is a valid array of pollfd of the given length.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if n >= 0 {
            return Ok(pfds.iter().map(|p| p.revents != 0).collect());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// [`poll`] for readability.
pub(crate) fn poll_readable(fds: &[BorrowedFd<'_>], ms: i32) -> std::io::Result<Vec<bool>> {
    let with_events: Vec<_> = fds.iter().map(|fd| (*fd, libc::POLLIN)).collect();
    poll(&with_events, ms)
}
