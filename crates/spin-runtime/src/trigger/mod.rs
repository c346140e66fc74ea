//! Every trigger of an app running together: HTTP ([`crate::server`]) beside Redis
//! ([`redis`]), MQTT ([`mqtt`]), cron ([`cron`]), command ([`command`]), SQS ([`sqs`]) and
//! NATS ([`nats`]).
//!
//! - Each trigger's component export is checked when the app starts, naming the component
//!   and the export it lacks.
//! - A trigger whose server is unreachable logs, retries with backoff and never stops the
//!   others; a failing handler is logged and the next event is handled.
//! - The shutdown signal stops every trigger: none takes a new event, in-flight handlers
//!   get the drain bound, then what is left is dropped.
//! - A command trigger's exit ends the app with the guest's exit code.

pub mod command;
pub mod cron;
pub mod mqtt;
pub mod nats;
pub mod redis;
pub mod sqs;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use tokio::net::TcpListener;
use wasmtime::component::{ComponentExportIndex, ComponentNamedList, Lift, Lower};

use crate::host::variables::{self, Resolved};
use crate::runtime::{LoadedApp, PreparedComponent, RuntimeConfig};

/// First wait before reconnecting to a server that went away; doubled per failure.
const BACKOFF_START: Duration = Duration::from_millis(200);
/// Longest wait between reconnection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The app-wide stop signal, seen by every trigger.
#[derive(Clone)]
pub(crate) struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    /// Whether the app is stopping.
    pub(crate) fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once the app is stopping.
    pub(crate) async fn wait(&mut self) {
        let _ = self.0.wait_for(|stopping| *stopping).await;
    }
}

/// Exponential backoff between reconnection attempts (200 ms doubling to 5 s).
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(BACKOFF_START)
    }

    /// After a successful connection.
    pub(crate) fn reset(&mut self) {
        self.0 = BACKOFF_START;
    }

    /// Waits the current delay (doubling it for the next time); false if the app stopped.
    pub(crate) async fn wait(&mut self, stop: &mut Stop) -> bool {
        let delay = self.0;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
        tokio::select! {
            _ = tokio::time::sleep(delay) => !stop.is_set(),
            _ = stop.wait() => false,
        }
    }

    /// The delay the next [`Self::wait`] takes (for logs).
    pub(crate) fn next(&self) -> Duration {
        self.0
    }
}

/// Expands `{{ variable }}` templates of a trigger setting against the app's variables.
pub(crate) fn expand(
    template: &str,
    vars: &BTreeMap<String, Resolved>,
    what: &str,
) -> anyhow::Result<String> {
    variables::render_template(template, |name| vars.get(name).map(|r| r.value.clone()))
        .map_err(|e| anyhow!("{what}: {e}"))
}

/// A component's export that a trigger calls, found when the app starts.
pub(crate) struct Handler {
    pub(crate) component: Arc<PreparedComponent>,
    pub(crate) export: ComponentExportIndex,
}

/// The names of a component's exports (for error messages).
fn export_names(component: &PreparedComponent) -> String {
    let pre = &component.instance_pre;
    let names: Vec<String> = pre
        .component()
        .component_type()
        .exports(pre.engine())
        .map(|(name, _)| name.to_string())
        .collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Finds `instance`'s function `func` (or the root function `func` when `instance` is
/// `None`) in the component a trigger runs; `hint` tells the user how to build one.
pub(crate) fn find_handler(
    app: &LoadedApp,
    trigger: &str,
    component: &str,
    instance: Option<&str>,
    func: &str,
    hint: &str,
) -> anyhow::Result<Handler> {
    let prepared = app
        .component(component)
        .ok_or_else(|| anyhow!("{trigger}: component `{component}` is not loaded"))?;
    let wasm = prepared.instance_pre.component();
    let export = match instance {
        Some(i) => wasm
            .get_export_index(None, i)
            .and_then(|idx| wasm.get_export_index(Some(&idx), func)),
        None => wasm.get_export_index(None, func),
    };
    let Some(export) = export else {
        let wanted = match instance {
            Some(i) => format!("`{i}` (function `{func}`)"),
            None => format!("function `{func}`"),
        };
        anyhow::bail!(
            "{trigger}: component `{component}` does not export {wanted} (its exports: {}); {hint}",
            export_names(&prepared)
        );
    };
    Ok(Handler {
        component: prepared,
        export,
    })
}

/// Instantiates the handler's component in a fresh store and calls its export with
/// `params`, within the request deadline (`SPIN_SHIM_REQUEST_TIMEOUT`). `trigger_type`
/// (`redis`, `mqtt`, `cron`) labels the call in the exported `spin.request_count`.
pub(crate) async fn call<P, R>(
    app: &LoadedApp,
    handler: &Handler,
    trigger_type: &'static str,
    params: P,
) -> anyhow::Result<R>
where
    P: ComponentNamedList + Lower + Send + Sync + 'static,
    R: ComponentNamedList + Lift + Send + Sync + 'static,
{
    let component = &handler.component;
    otel_export::count_request(trigger_type, &app.app.name, &component.id);
    let mut store = app.new_store(component)?;
    let usage = store.data().limits.usage();
    let run = async {
        let instance = component
            .instance_pre
            .instantiate_async(&mut store)
            .await
            .map_err(anyhow::Error::from)
            .context("cannot instantiate the component")?;
        let func = instance
            .get_typed_func::<P, R>(&mut store, &handler.export)
            .map_err(anyhow::Error::from)
            .context("the export does not have the trigger's signature")?;
        let results = func
            .call_async(&mut store, params)
            .await
            .map_err(anyhow::Error::from)?;
        anyhow::Ok(results)
    };
    let run = crate::metrics::cpu_timed(usage, run);
    match app.limits.request_timeout {
        Some(deadline) => tokio::time::timeout(deadline, run).await.map_err(|_| {
            anyhow!(
                "the handler ran longer than the request deadline of {deadline:?} (set {} to \
                 change it, 0 for none); the instance was stopped",
                crate::limits::REQUEST_TIMEOUT_ENV
            )
        })?,
        None => run.await,
    }
}

/// What one trigger task ended with: `Some(code)` for a command, `None` for the others.
type TaskResult = anyhow::Result<Option<i32>>;

/// Runs every trigger of `app` until `shutdown` completes or a command trigger exits;
/// `listener` serves the HTTP triggers. `on_ready` gets the listener's address once every
/// trigger is prepared. Returns the command's exit code, else 0.
///
/// Fails before serving anything when a trigger's component lacks its export or a setting
/// does not expand.
pub async fn run(
    app: Arc<LoadedApp>,
    config: &RuntimeConfig,
    listener: Option<TcpListener>,
    args: &[String],
    on_ready: impl FnOnce(Option<std::net::SocketAddr>),
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<i32> {
    let events = &app.app.event_triggers;
    let vars = if events.is_empty() {
        BTreeMap::new()
    } else {
        app.host.variables().clone()
    };
    let redis = redis::prepare(&app, &vars)?;
    let mqtt = mqtt::prepare(&app, &vars)?;
    let cron = cron::prepare(&app, &config.host.env)?;
    let command = command::prepare(&app, args)?;
    let sqs = sqs::prepare(&app, &vars, &config.host.env)?;
    let nats = nats::prepare(&app, &vars)?;

    on_ready(match &listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop = Stop(stop_rx);
    let drain = config.drain_timeout;
    let mut tasks: tokio::task::JoinSet<TaskResult> = tokio::task::JoinSet::new();
    if let Some(listener) = listener {
        let (app, mut stop, tls) = (app.clone(), stop.clone(), config.tls.clone());
        tasks.spawn(async move {
            let stopped = async move { stop.wait().await };
            crate::server::serve(app, listener, tls, stopped, drain).await?;
            Ok(None)
        });
    }
    for subscriber in redis {
        let (app, stop) = (app.clone(), stop.clone());
        tasks.spawn(async move {
            subscriber.run(app, stop).await;
            Ok(None)
        });
    }
    for listener in mqtt {
        let (app, stop) = (app.clone(), stop.clone());
        tasks.spawn(async move {
            listener.run(app, stop).await;
            Ok(None)
        });
    }
    for queue in sqs {
        let (app, stop) = (app.clone(), stop.clone());
        tasks.spawn(async move {
            queue.run(app, stop).await;
            Ok(None)
        });
    }
    for listener in nats {
        let (app, stop) = (app.clone(), stop.clone());
        tasks.spawn(async move {
            listener.run(app, stop).await;
            Ok(None)
        });
    }
    for schedule in cron {
        let (app, stop) = (app.clone(), stop.clone());
        tasks.spawn(async move {
            schedule.run(app, stop, drain).await;
            Ok(None)
        });
    }
    let mut command_done = command.is_none();
    if let Some(command) = command {
        let app = app.clone();
        tasks.spawn(async move { command.run(app).await.map(Some) });
    }

    tokio::pin!(shutdown);
    let mut code = 0;
    let mut failure = None;
    // Until the shutdown signal, a command's exit, or a trigger failing.
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            done = tasks.join_next() => match done {
                None => break,
                Some(Ok(Ok(Some(c)))) => {
                    code = c;
                    command_done = true;
                    break;
                }
                Some(Ok(Ok(None))) => {}
                Some(Ok(Err(e))) => {
                    failure = Some(e);
                    break;
                }
                Some(Err(e)) => {
                    failure = Some(anyhow!("a trigger task failed: {e}"));
                    break;
                }
            },
        }
    }
    let _ = stop_tx.send(true);
    // The HTTP server drains within `drain` itself; the margin lets it finish that.
    let drained = tokio::time::timeout(drain + Duration::from_millis(500), async {
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(Ok(Some(c))) => {
                    code = c;
                    command_done = true;
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::error!("trigger failed while stopping: {e:#}"),
                Err(e) => tracing::error!("trigger task failed while stopping: {e}"),
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = tasks.len(),
            "drain timeout of {drain:?} passed; dropping the triggers' remaining work"
        );
        tasks.shutdown().await;
    }
    if !command_done && failure.is_none() {
        // Stopped by the signal before the command finished: as a process ended by SIGTERM.
        tracing::warn!("the command was stopped before it finished: exit code 143");
        code = 128 + libc::SIGTERM;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(code),
    }
}
