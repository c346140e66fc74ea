//! Instance reuse for WASIp3 HTTP components (`wasi:http/handler@0.3`), as Spin and
//! `wasmtime serve` do it: one instance serves up to [`InstanceReuse::max_requests`]
//! requests, up to [`InstanceReuse::max_concurrent`] at once, and is dropped after
//! [`InstanceReuse::idle_timeout`] without work. The scheduling is wasmtime-wasi-http's
//! [`ProxyHandler`] (the one both of them use); this module supplies the stores (the same
//! as a fresh request's: WASI context, host state, memory cap, time slice), the request
//! deadline and what an instance's end means for metrics and logs.
//!
//! A request past the deadline ends with 504 and stops the instance from taking more; if
//! its guest code does not return, the instance is dropped with every request it holds.
//! A trap drops the instance: the requests it was serving fail with 500, later requests
//! get a new instance.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::component::GuestTaskId;
use wasmtime::{Store, StoreContextMut};
use wasmtime_wasi_http::handler::{
    HandlerState, Instance, Proxy, ProxyHandler, ShouldAccept, WorkerExpiration, WorkerState,
    WorkerStatus,
};
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::WasiHttpView;

use crate::limits::{InstanceReuse, Limits};
use crate::metrics::{Metrics, WorkerCpu};
use crate::runtime::{LoadedApp, PreparedComponent};
use crate::state::InstanceState;

/// The dispatcher of one WASIp3 component's requests to its instances.
pub(crate) type P3Handler = ProxyHandler<P3Instances>;

/// The dispatcher of WASIp3 component `component`'s requests (`pre` its handler), created
/// at its first request and kept beside its code ([`PreparedComponent::server_state`]).
pub(crate) fn instances(
    app: &LoadedApp,
    component: &Arc<PreparedComponent>,
    pre: &ServicePre<InstanceState>,
) -> P3Handler {
    let kept = component.server_state.get_or_init(|| {
        Box::new(handler(
            component,
            pre.clone(),
            app.max_instance_memory(),
            &app.limits,
            app.metrics.clone(),
        ))
    });
    kept.downcast_ref::<P3Handler>()
        .expect("the server keeps only a WASIp3 dispatcher beside a component's code")
        .clone()
}

/// Creates the dispatcher for `component` (held by the component itself, hence the weak
/// reference: instances of code replaced by tiered compilation end when idle).
fn handler(
    component: &Arc<PreparedComponent>,
    pre: ServicePre<InstanceState>,
    max_instance_memory: Option<usize>,
    limits: &Limits,
    metrics: Option<Arc<Metrics>>,
) -> P3Handler {
    ProxyHandler::new(P3Instances {
        id: component.id.clone(),
        component: Arc::downgrade(component),
        pre,
        max_instance_memory,
        request_timeout: limits.request_timeout,
        reuse: limits.reuse,
        metrics,
    })
}

/// How one WASIp3 component's instances are made.
pub(crate) struct P3Instances {
    id: String,
    component: Weak<PreparedComponent>,
    pre: ServicePre<InstanceState>,
    max_instance_memory: Option<usize>,
    request_timeout: Option<Duration>,
    reuse: InstanceReuse,
    metrics: Option<Arc<Metrics>>,
}

impl P3Instances {
    /// The per-request deadline (`SPIN_SHIM_REQUEST_TIMEOUT`), `None` when off.
    pub(crate) fn request_timeout(&self) -> Option<Duration> {
        self.request_timeout
    }

    /// The component's id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

impl HandlerState for P3Instances {
    type StoreData = InstanceState;
    type WorkerExpiration = Expiration;
    type WorkerState = P3Worker;

    async fn instantiate(&self) -> wasmtime::Result<Instance<InstanceState, Expiration, P3Worker>> {
        let component = self
            .component
            .upgrade()
            .ok_or_else(|| wasmtime::format_err!("component `{}` was unloaded", self.id))?;
        let mut store = component
            .new_store(
                self.max_instance_memory,
                &[],
                crate::runtime::Stdio::Default,
            )
            .map_err(wasmtime::Error::from_anyhow)?;
        let cpu = WorkerCpu::start(&self.id);
        // The time-slice yields get a mark where the guest resumes: a poll of the worker
        // that resumes a busy guest starts there, not where the worker's other marks are.
        if let Some(cpu) = &cpu {
            let cpu = cpu.clone();
            crate::runtime::yield_at_slice_end(&mut store, move || cpu.mark());
        }
        let instantiate =
            crate::metrics::cpu_timed_to(cpu.clone(), self.pre.instantiate_async(&mut store));
        let service = match self.request_timeout {
            Some(d) => tokio::time::timeout(d, instantiate).await.map_err(|_| {
                wasmtime::format_err!(
                    "component `{}`: instantiation ran longer than the request deadline of \
                     {d:?}",
                    self.id
                )
            })??,
            None => instantiate.await?,
        };
        if let Some(m) = &self.metrics {
            m.instantiated(&self.id);
        }
        Ok(Instance {
            store,
            proxy: Proxy::P3(service),
            view: <InstanceState as WasiHttpView>::http,
            expiration: Expiration {
                idle_timeout: self.reuse.idle_timeout,
                request_timeout: self.request_timeout,
                sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
                cpu: cpu.clone(),
            },
            state: P3Worker {
                id: self.id.clone(),
                reuse: self.reuse,
                request_timeout: self.request_timeout,
                metrics: self.metrics.clone(),
                cpu,
            },
        })
    }
}

/// One instance's admission rule, request deadline and end.
pub(crate) struct P3Worker {
    id: String,
    reuse: InstanceReuse,
    request_timeout: Option<Duration>,
    metrics: Option<Arc<Metrics>>,
    /// The instance's CPU time per request, when usage is recorded.
    cpu: Option<Arc<WorkerCpu>>,
}

impl WorkerState for P3Worker {
    type StoreData = InstanceState;
    /// The request's server span, the parent of its host calls' spans.
    type RequestData = tracing::Span;

    fn should_accept_request(&self, concurrent: usize, total: usize) -> ShouldAccept {
        // Asked at the start of most polls of the worker, right before it runs guest work.
        if let Some(cpu) = &self.cpu {
            cpu.mark();
        }
        if total >= self.reuse.max_requests {
            ShouldAccept::Never
        } else if concurrent >= self.reuse.max_concurrent {
            ShouldAccept::No
        } else {
            ShouldAccept::Yes
        }
    }

    fn on_request_start(
        &self,
        mut store: StoreContextMut<'_, InstanceState>,
        span: tracing::Span,
        _: GuestTaskId,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + Sync + 'static>> {
        // An instance idle since its last slice would otherwise yield at its first check.
        store.data().slice.restart();
        // Requests served at once share the latest one's trace for their host calls.
        if otel_export::enabled() {
            store.data_mut().host.request_trace = Some(otel_export::context_of(&span));
        }
        let expiry: Pin<Box<dyn Future<Output = ()> + Send + Sync>> = match self.request_timeout {
            Some(d) => Box::pin(tokio::time::sleep(d)),
            None => Box::pin(std::future::pending()),
        };
        // wasmtime-wasi-http drops this future once the request is answered or expired.
        match self.cpu.as_ref().map(WorkerCpu::request_started) {
            Some(in_flight) => Box::pin(async move {
                let _in_flight = in_flight;
                expiry.await
            }),
            None => expiry,
        }
    }

    fn drop(&self, store: Store<InstanceState>, result: wasmtime::Result<()>) {
        let Err(e) = result else { return };
        // wasmtime-wasi-http reports a worker dropped unfinished as "worker panicked"; when
        // no panic is unwinding, its task was cancelled: the runtime is shutting down.
        if !std::thread::panicking() && e.to_string() == "worker panicked" {
            tracing::debug!(component = %self.id, "instance dropped at shutdown");
            return;
        }
        // The expiration's error: a request ran past the deadline and its guest code did
        // not give control back (the request itself was answered 504).
        if e.to_string() == "guest timed out" {
            super::log_past_deadline(
                &self.id,
                self.request_timeout,
                " without giving control back; its reused instance was stopped, with the \
                 requests it was serving",
            );
            return;
        }
        if let Some(m) = &self.metrics {
            m.trapped(&self.id);
        }
        let e = super::memory_cause(anyhow::Error::from(e), &store.data().limits, &self.id);
        tracing::error!(
            component = %self.id,
            "a reused instance of the component was stopped, with the requests it was \
             serving: {e:#}"
        );
    }
}

/// When an instance ends: after [`InstanceReuse::idle_timeout`] without work, or once its
/// most recent request has run past the request deadline (wasmtime-wasi-http checks this
/// outside the instance's event loop, which a guest that never returns holds).
pub(crate) struct Expiration {
    idle_timeout: Duration,
    request_timeout: Option<Duration>,
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// Polled at the end of each poll of the worker: [`WorkerCpu::poll_ended`].
    cpu: Option<Arc<WorkerCpu>>,
}

impl WorkerExpiration for Expiration {
    fn poll(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        status: WorkerStatus,
        start: Instant,
    ) -> Poll<()> {
        let me = self.get_mut();
        if let Some(cpu) = &me.cpu {
            cpu.poll_ended();
        }
        let timeout = match status {
            WorkerStatus::Idle => Some(me.idle_timeout),
            WorkerStatus::Requests | WorkerStatus::PostReturn => me.request_timeout,
        };
        let Some(deadline) = timeout.and_then(|t| start.checked_add(t)) else {
            return Poll::Pending;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        // The deadline moves at every request and at every change of status (three times
        // a request), mostly later. Moving the timer costs a trip through tokio's timer
        // wheel and its lock, so a later deadline waits for the timer set for an earlier
        // one to fire, and the timer is only moved then; an earlier one moves it at once.
        if deadline < me.sleep.deadline() {
            me.sleep.as_mut().reset(deadline);
        }
        match me.sleep.as_mut().poll(cx) {
            Poll::Ready(()) if tokio::time::Instant::now() < deadline => {
                me.sleep.as_mut().reset(deadline);
                me.sleep.as_mut().poll(cx)
            }
            fired => fired,
        }
    }
}
