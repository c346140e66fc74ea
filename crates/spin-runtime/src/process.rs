//! What the process serving an app sets up around it: logging and trace export, the
//! termination signals, library backtraces, and what the deployment's environment asks of
//! the app.

use std::future::Future;

use anyhow::Context;

use crate::app::App;

/// What spin-operator's environment asks of an app before it is served:
/// `SPIN_COMPONENTS_TO_RETAIN` (as `settings` read it) selects the components
/// ([`App::retain_components`]), and `OTEL_EXPORTER_OTLP_*` configures trace export
/// ([`init_tracing`]).
pub(crate) fn apply_deployment_env(
    app: &mut App,
    settings: &spin_shim_settings::container::ContainerSettings,
) -> anyhow::Result<()> {
    let retain = &settings.components_to_retain;
    if !retain.is_empty() {
        app.retain_components(retain)?;
        tracing::info!("selective deployment: serving components {retain:?}");
    }
    Ok(())
}

/// Turns off the capture of library backtraces (`std::backtrace::Backtrace::capture`, used
/// by wasmtime's and anyhow's errors) unless `RUST_LIB_BACKTRACE` already says otherwise;
/// panics still print a backtrace under `RUST_BACKTRACE`. With `RUST_BACKTRACE=1` in the
/// environment every request paid for an unwind: wasmtime builds an error while dropping each
/// request's store (its "future dropped" fiber disposal), about 6% of the CPU at c=16.
/// Call it first in `main`, before any thread exists (it sets an environment variable).
pub fn quiet_library_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// A future completing on the first SIGTERM or SIGINT. Installing the handlers matters
/// in a container: PID 1 ignores SIGTERM without one. Once they are installed, the signals
/// are unblocked on the calling thread: the shim's executor holds them blocked from the
/// container's start, so one sent before this point is delivered now instead of lost.
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot install SIGINT handler")?;
    // SAFETY: a local, initialised signal set; pthread_sigmask changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}

/// Logs to stderr, filtered by `RUST_LOG` from `env` (default `info`), and exports traces,
/// metrics and the app's output as logs when `OTEL_EXPORTER_OTLP_*` in `env` (or the process
/// environment) asks for it ([`otel_export`]; service name `spin` unless `OTEL_SERVICE_NAME`
/// says otherwise).
/// Idempotent.
pub fn init_tracing(env: &[(String, String)]) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    static ONCE: std::sync::Once = std::sync::Once::new();
    // RUST_LOG and OTEL_* follow their own conventions (they are not this project's
    // settings): from `env` first, else from this process's environment.
    let lookup = |key: &str| {
        spin_shim_settings::lookup(env, key)
            .map(str::to_string)
            .or_else(|| std::env::var(key).ok())
    };
    ONCE.call_once(|| {
        let filter = lookup("RUST_LOG").unwrap_or_else(|| "info".to_string());
        // Host-call trace events carry arguments and results (secrets): never logged.
        // The app's output already went to stdout/stderr; as events it is for spans only.
        let filter = format!(
            "{filter},{}=off,{}=off",
            otel_export::HOST_CALL_TARGETS,
            otel_export::APP_LOG_TARGET
        );
        // Container output is a file or pipe (docker logs, kubectl logs): colour escapes
        // only on a terminal.
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::new(filter));
        let otel = otel_export::layer_from_env(&lookup, "spin", &[]);
        otel_export::start_metrics_and_logs(&lookup, "spin");
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(fmt).with(otel));
        if dispatch.clone().try_init().is_err() {
            // In a container the shim's container-creation helper installed its subscriber
            // before it forked this process: ours serves this thread and every thread of
            // the runtime ([`enter_tracing`]).
            let _ = THREAD_DISPATCH.set(dispatch.clone());
            enter_tracing();
        }
        for (on, line) in otel_export::decisions() {
            if on {
                tracing::info!("{line}");
            } else {
                tracing::warn!("{line}");
            }
        }
    });
}

/// The subscriber of [`init_tracing`] when another one was already global.
static THREAD_DISPATCH: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();

/// Makes [`init_tracing`]'s subscriber the calling thread's for good (runtime threads call
/// it at start), where it could not be made the global one.
pub(crate) fn enter_tracing() {
    if let Some(d) = THREAD_DISPATCH.get() {
        std::mem::forget(tracing::dispatcher::set_default(d));
    }
}
