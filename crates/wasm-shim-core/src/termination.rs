//! What the container's init process reports when its workload ends or cannot start: the
//! termination-message file kubelet reads ([`report_start_failure`]), and the exit status a
//! signal gives PID 1 ([`install_termination_handlers`]). Engines and the executor use it.

use std::path::{Path, PathBuf};

use libcontainer::oci_spec::runtime::Spec;

/// Kubelet's default `terminationMessagePath`.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// The most kubelet reads from a termination-message file.
pub const TERMINATION_MESSAGE_MAX: usize = 4096;

/// The container's termination-message file, opened by [`crate::executor::ShimExecutor`] before the
/// engine confines the process (Landlock denies `/dev` afterwards); taken by the first
/// [`report_start_failure`].
static TERMINATION_LOG: std::sync::Mutex<Option<std::fs::File>> = std::sync::Mutex::new(None);

/// Whether `source` is a file kubelet made for a termination message:
/// `<kubelet root>/pods/<pod uid>/containers/<container name>/<random id>` (kubelet's
/// `makeMounts`, `getPodContainerDir`).
fn is_kubelet_termination_file(source: &Path) -> bool {
    let parts: Vec<_> = source.components().collect();
    let n = parts.len();
    use std::path::Component::Normal;
    n >= 5
        && matches!(parts[n - 5], Normal(p) if p == "pods")
        && matches!(parts[n - 4], Normal(_))
        && matches!(parts[n - 3], Normal(p) if p == "containers")
        && matches!(parts[n - 2], Normal(_))
        && matches!(parts[n - 1], Normal(_))
}

/// The in-container path of the termination-message file kubelet mounted into `spec`: the
/// mount at [`DEFAULT_TERMINATION_MESSAGE_PATH`], else a bind mount of a kubelet
/// termination file (a pod's own `terminationMessagePath`). None outside Kubernetes.
pub fn termination_message_path(spec: &Spec) -> Option<PathBuf> {
    let mounts = spec.mounts().as_deref().unwrap_or_default();
    if let Some(m) = mounts
        .iter()
        .find(|m| m.destination() == Path::new(DEFAULT_TERMINATION_MESSAGE_PATH))
    {
        return Some(m.destination().clone());
    }
    let is_bind = |m: &libcontainer::oci_spec::runtime::Mount| {
        m.typ().as_deref() == Some("bind")
            || m.options()
                .iter()
                .flatten()
                .any(|o| o == "bind" || o == "rbind")
    };
    mounts
        .iter()
        .rev()
        .find(|m| {
            is_bind(m)
                && m.source()
                    .as_deref()
                    .is_some_and(is_kubelet_termination_file)
        })
        .map(|m| m.destination().clone())
}

/// `msg` as a termination message: control characters other than newline and tab
/// escaped (`\u{1b}`), cut on a character boundary to [`TERMINATION_MESSAGE_MAX`] bytes
/// with a note that the log has the rest.
pub fn termination_message(msg: &str) -> String {
    const CUT: &str = " ... (cut; the container log has the whole error)";
    let mut out = String::with_capacity(msg.len().min(TERMINATION_MESSAGE_MAX));
    for c in msg.trim_end().chars() {
        let piece: String = if c.is_control() && c != '\n' && c != '\t' {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        if out.len() + piece.len() > TERMINATION_MESSAGE_MAX - CUT.len() {
            out.push_str(CUT);
            return out;
        }
        out.push_str(&piece);
    }
    out
}

/// Opens the termination-message file of `spec` (in-container path, so after pivot_root)
/// for [`report_start_failure`]; a missing or unusable file is logged and ignored (the
/// container runs regardless). Not following a symlink the image may have put there.
pub(crate) fn open_termination_log(spec: &Spec) {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = termination_message_path(spec) else {
        return;
    };
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .and_then(|f| {
            if f.metadata()?.is_file() {
                Ok(f)
            } else {
                Err(std::io::Error::other("not a regular file"))
            }
        });
    match opened {
        Ok(f) => *TERMINATION_LOG.lock().unwrap_or_else(|e| e.into_inner()) = Some(f),
        Err(e) => eprintln!(
            "warning: termination-message file {} cannot be opened ({e}): a start failure \
             will be in the container log only",
            path.display()
        ),
    }
}

/// Writes `msg` (bounded and escaped by [`termination_message`]) to the container's
/// termination-message file, so that kubelet shows it as the container's termination
/// message (`kubectl describe pod`, CRI ContainerStatus `message`). Engines call it when
/// the workload cannot start or fails; only the first call writes. Works after the process
/// confined itself: the file was opened before.
pub fn report_start_failure(msg: &str) {
    use std::os::unix::fs::FileExt;
    let file = TERMINATION_LOG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(f) = file {
        if let Err(e) = f.write_all_at(termination_message(msg).as_bytes(), 0) {
            eprintln!("warning: cannot write the termination message: {e}");
        }
    }
}

/// Holds SIGTERM and SIGINT pending (blocked on the calling thread, and on every thread it
/// starts) until the engine has installed its handlers, which release them. PID 1 of a pid
/// namespace discards a signal it has no handler for when the signal arrives, so a `kill`
/// right after the task started (before the runtime installed its handler) was lost and the
/// container ran until SIGKILL; blocked, it waits for the handler instead.
pub fn hold_termination_signals() {
    set_termination_mask(libc::SIG_BLOCK);
}

/// Delivers a SIGTERM or SIGINT held by [`hold_termination_signals`] to the handlers now
/// installed (unblocks them on the calling thread).
pub fn release_termination_signals() {
    set_termination_mask(libc::SIG_UNBLOCK);
}

fn set_termination_mask(how: libc::c_int) {
    // SAFETY: a local, initialised signal set; pthread_sigmask changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Makes SIGTERM and SIGINT end the process with 128+signal: PID 1 of a pid namespace
/// ignores signals it has no handler for. A signal held until now is delivered.
pub fn install_termination_handlers() {
    extern "C" fn on_signal(sig: libc::c_int) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) }
    }
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: installing a handler that only calls _exit.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
    release_termination_signals();
}
