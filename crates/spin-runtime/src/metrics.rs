//! Prometheus metrics of one app, served on an opt-in address ([`METRICS_ADDR_ENV`]) at
//! `/metrics` in the text exposition format:
//! - `spin_http_requests_total{component,route,status}`;
//! - `spin_http_request_duration_seconds{component,route}` (histogram, 0.5 ms to ~16 s);
//! - `spin_http_requests_in_flight`;
//! - `spin_component_instantiations_total{component}`, `spin_component_traps_total{component}`;
//! - `spin_compile_cache_total{result="hit"|"miss"}` (components loaded at start);
//! - Spin 3.6's per-component histograms, named as an OpenTelemetry collector's Prometheus
//!   exporter names Spin's OTLP ones: `spin_component_cpu_time{component_id,unit="s"}`,
//!   `spin_component_memory_used_on_init{component_id,unit="By"}` and
//!   `spin_component_memory_used{component_id,unit="By"}`, one observation per component
//!   instance when it ends ([`InstanceUsage`]); for a reused WASIp3 instance, which serves
//!   many requests, the CPU time is observed per request instead ([`WorkerCpu`]).
//!
//! Every series carries `app` (the app name). Without the variable nothing is recorded
//! (the request path checks one `Option`).
//!
//! [`InstanceUsage`] also feeds the same histograms to OTLP when metrics are exported there
//! ([`otel_export::record_component_usage`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};

use anyhow::Context;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Env var: the address to serve `/metrics` on (e.g. `0.0.0.0:9464`); unset or empty: off.
pub const METRICS_ADDR_ENV: &str = "SPIN_SHIM_METRICS_ADDR";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    component: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    component: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabels {
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    result: &'static str,
}

/// Labels of Spin's per-component histograms (its OTLP attributes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UsageLabels {
    component_id: String,
    unit: &'static str,
}

/// The app's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram>,
    in_flight: Gauge,
    instantiations: Family<ComponentLabels, Counter>,
    traps: Family<ComponentLabels, Counter>,
    cache: Family<CacheLabels, Counter>,
    cpu_time: Family<UsageLabels, Histogram>,
    memory_on_init: Family<UsageLabels, Histogram>,
    memory_used: Family<UsageLabels, Histogram>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// Ends an in-flight request when dropped.
pub struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}

impl Metrics {
    /// A registry for app `app`, every series labelled with it.
    pub fn new(app: &str) -> Arc<Metrics> {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_label(("app".into(), app.to_string().into()));
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "spin_http_requests",
            "HTTP requests answered, by component, route and status",
            requests.clone(),
        );
        let duration = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "spin_http_request_duration_seconds",
            "Time from request to response head, by component and route",
            duration.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "spin_http_requests_in_flight",
            "Requests being handled",
            in_flight.clone(),
        );
        let instantiations = Family::<ComponentLabels, Counter>::default();
        registry.register(
            "spin_component_instantiations",
            "Component instances created",
            instantiations.clone(),
        );
        let traps = Family::<ComponentLabels, Counter>::default();
        registry.register(
            "spin_component_traps",
            "Requests whose component trapped or failed",
            traps.clone(),
        );
        let cache = Family::<CacheLabels, Counter>::default();
        registry.register(
            "spin_compile_cache",
            "Components loaded at start, from the compile cache (hit) or compiled (miss)",
            cache.clone(),
        );
        let cpu_time = Family::<UsageLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(otel_export::CPU_TIME_BOUNDS.iter().copied())
        });
        registry.register(
            "spin_component_cpu_time",
            "CPU time of each component instance, in seconds (Spin's spin.component_cpu_time)",
            cpu_time.clone(),
        );
        let bytes = || Histogram::new(otel_export::MEMORY_BOUNDS.iter().copied());
        let memory_on_init = Family::<UsageLabels, Histogram>::new_with_constructor(bytes);
        registry.register(
            "spin_component_memory_used_on_init",
            "Linear memory of each component instance once instantiated, in bytes \
             (Spin's spin.component_memory_used_on_init)",
            memory_on_init.clone(),
        );
        let memory_used = Family::<UsageLabels, Histogram>::new_with_constructor(bytes);
        registry.register(
            "spin_component_memory_used",
            "Linear memory of each component instance when it ended, in bytes \
             (Spin's spin.component_memory_used)",
            memory_used.clone(),
        );
        Arc::new(Metrics {
            registry: root,
            requests,
            duration,
            in_flight,
            instantiations,
            traps,
            cache,
            cpu_time,
            memory_on_init,
            memory_used,
        })
    }

    /// Counts what loading did.
    pub fn loaded(&self, hits: u64, misses: u64) {
        self.cache
            .get_or_create(&CacheLabels { result: "hit" })
            .inc_by(hits);
        self.cache
            .get_or_create(&CacheLabels { result: "miss" })
            .inc_by(misses);
    }

    /// A request starts; it ends when the guard drops.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.inc();
        InFlight(self.clone())
    }

    /// A request was answered.
    pub fn answered(&self, component: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                component: component.to_string(),
                route: route.to_string(),
                status,
            })
            .inc();
        self.duration
            .get_or_create(&RouteLabels {
                component: component.to_string(),
                route: route.to_string(),
            })
            .observe(seconds);
    }

    /// A component was instantiated.
    pub fn instantiated(&self, component: &str) {
        self.instantiations
            .get_or_create(&ComponentLabels {
                component: component.to_string(),
            })
            .inc();
    }

    /// A component trapped or failed a request.
    pub fn trapped(&self, component: &str) {
        self.traps
            .get_or_create(&ComponentLabels {
                component: component.to_string(),
            })
            .inc();
    }

    /// One component instance ended having used `cpu_seconds` (`None`: not measured) and the
    /// memory given (`None`: recorded elsewhere, as for a reused instance's requests).
    fn instance_ended(
        &self,
        component: &str,
        cpu_seconds: Option<f64>,
        memory: Option<(u64, u64)>,
    ) {
        let labels = |unit| UsageLabels {
            component_id: component.to_string(),
            unit,
        };
        if let Some(cpu) = cpu_seconds {
            self.cpu_time.get_or_create(&labels("s")).observe(cpu);
        }
        let Some((on_init, used)) = memory else {
            return;
        };
        self.memory_on_init
            .get_or_create(&labels("By"))
            .observe(on_init as f64);
        self.memory_used
            .get_or_create(&labels("By"))
            .observe(used as f64);
    }

    /// The text exposition of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The registry that per-component usage goes to: the first one served in this process
/// (a process serves one app).
static USAGE_SINK: OnceLock<Arc<Metrics>> = OnceLock::new();

/// Whether per-component usage is recorded anywhere (OTLP metrics or the Prometheus
/// endpoint); when not, nothing is measured.
fn usage_recorded() -> bool {
    otel_export::metrics_enabled() || USAGE_SINK.get().is_some()
}

/// Records one component usage observation to OTLP and the Prometheus endpoint.
fn record_usage(component: &str, cpu_seconds: Option<f64>, memory: Option<(u64, u64)>) {
    otel_export::record_component_usage(component, cpu_seconds, memory);
    if let Some(m) = USAGE_SINK.get() {
        m.instance_ended(component, cpu_seconds, memory);
    }
}

/// What one component instance uses, as Spin 3.6 measures it: CPU time running the guest
/// ([`cpu_timed`]), its linear memory once instantiated and at its end (the store's memory
/// limiter reports every growth: [`InstanceUsage::memory_grew`]). Recorded when the instance
/// and the future that ran it are both gone, to OTLP (when metrics are exported) and to the
/// Prometheus endpoint (when served).
#[derive(Debug)]
pub struct InstanceUsage {
    component: Box<str>,
    cpu_nanos: AtomicU64,
    /// Whether a guest future was timed ([`cpu_timed`]): a reused WASIp3 instance runs in
    /// wasmtime-wasi-http's worker, which is not; [`WorkerCpu`] reports its CPU time per
    /// request.
    timed: AtomicBool,
    on_init: AtomicU64,
    used: AtomicU64,
}

impl InstanceUsage {
    /// An account for one instance of component `component`, or `None` when neither OTLP
    /// metrics nor the Prometheus endpoint would record it (the default: no cost).
    pub fn start(component: &str) -> Option<Arc<InstanceUsage>> {
        if !usage_recorded() {
            return None;
        }
        Some(Arc::new(InstanceUsage {
            component: component.into(),
            cpu_nanos: AtomicU64::new(0),
            timed: AtomicBool::new(false),
            on_init: AtomicU64::new(0),
            used: AtomicU64::new(0),
        }))
    }

    /// A linear memory grew from `current` to `desired` bytes. Growth from 0 is a memory
    /// being created, which instantiation does: it counts toward the memory used on init.
    pub fn memory_grew(&self, current: usize, desired: usize) {
        let delta = desired.saturating_sub(current) as u64;
        self.used.fetch_add(delta, Ordering::Relaxed);
        if current == 0 {
            self.on_init.fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// CPU time counted so far.
    pub fn cpu_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.cpu_nanos.load(Ordering::Relaxed))
    }
}

impl Drop for InstanceUsage {
    fn drop(&mut self) {
        let cpu = (*self.timed.get_mut()).then(|| self.cpu_time().as_secs_f64());
        let memory = (*self.on_init.get_mut(), *self.used.get_mut());
        record_usage(&self.component, cpu, Some(memory));
    }
}

/// This thread's CPU time in nanoseconds.
fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; this clock exists on every Linux.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Where measured CPU time goes.
pub trait CpuAccount: Send + Sync {
    /// Adds `nanos` of CPU time.
    fn add_cpu(&self, nanos: u64);
}

impl CpuAccount for InstanceUsage {
    fn add_cpu(&self, nanos: u64) {
        self.cpu_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.timed.store(true, Ordering::Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// A guest's future whose polls are timed ([`cpu_timed`]).
    pub struct CpuTimed<F, A> {
        #[pin]
        fut: F,
        account: Option<Arc<A>>,
    }
}

/// Runs `fut` (the future that drives a guest) adding the thread CPU time of each of its
/// polls to `usage`: the guest's code and the host work done inline on its behalf, not the
/// time it waits. Each poll runs on one thread, so the per-thread clock is exact even when
/// the task moves between threads. With `None` it only polls `fut`.
pub fn cpu_timed<F: Future>(
    usage: Option<Arc<InstanceUsage>>,
    fut: F,
) -> CpuTimed<F, InstanceUsage> {
    cpu_timed_to(usage, fut)
}

/// As [`cpu_timed`], adding to any [`CpuAccount`].
pub fn cpu_timed_to<F: Future, A: CpuAccount>(account: Option<Arc<A>>, fut: F) -> CpuTimed<F, A> {
    CpuTimed { fut, account }
}

impl<F: Future, A: CpuAccount> Future for CpuTimed<F, A> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(account) = this.account.as_ref() else {
            return this.fut.poll(cx);
        };
        let start = thread_cpu_nanos();
        let r = this.fut.poll(cx);
        account.add_cpu(thread_cpu_nanos().saturating_sub(start));
        r
    }
}

/// The CPU time of a reused WASIp3 instance, observed per request. Such an instance runs
/// in wasmtime-wasi-http's worker task, whose polls this runtime cannot wrap; instead the
/// worker's state marks points inside its polls ([`WorkerCpu::mark`]: when it considers
/// taking a request, starts one, resumes a guest after its time slice) and the end of each
/// poll ([`WorkerCpu::poll_ended`]), and the thread CPU time from a poll's first mark to its
/// end is counted (a poll runs on one thread, so this is the instance's own work). The time
/// before a poll's first mark is not, nor the polls right after the worker took a request
/// (the worker then polls its instance once more after the poll's end, unmarked): the
/// figure is a lower bound, exact for the guest code run between marks. Each counted span
/// goes to the requests the instance is serving, in equal shares, or, between requests, to
/// the last one started (a guest may write its body after its response); instantiation
/// goes to the first request. A request's CPU time is observed in
/// `spin.component_cpu_time` once the next request starts on the instance or the instance
/// ends.
pub struct WorkerCpu {
    component: Arc<str>,
    clock: std::sync::Mutex<WorkerClock>,
}

impl std::fmt::Debug for WorkerCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerCpu({})", self.component)
    }
}

#[derive(Default)]
struct WorkerClock {
    /// The thread and its CPU clock at the poll's last mark.
    open: Option<(std::thread::ThreadId, u64)>,
    /// Marks are ignored until the end of the next poll (see [`WorkerCpu`]).
    blind: bool,
    /// A request started since the last end of a poll.
    accepted: bool,
    in_flight: Vec<Arc<RequestCpu>>,
    latest: Option<Arc<RequestCpu>>,
    /// CPU time before the first request (instantiation).
    unattributed: u64,
}

impl WorkerClock {
    fn credit(&mut self, nanos: u64) {
        if let Some((first, rest)) = self.in_flight.split_first() {
            let share = nanos / (rest.len() as u64 + 1);
            let first_share = nanos - share * rest.len() as u64;
            first.nanos.fetch_add(first_share, Ordering::Relaxed);
            for r in rest {
                r.nanos.fetch_add(share, Ordering::Relaxed);
            }
        } else if let Some(latest) = &self.latest {
            latest.nanos.fetch_add(nanos, Ordering::Relaxed);
        } else {
            self.unattributed += nanos;
        }
    }
}

/// One request's CPU time on a reused instance; observed when dropped.
struct RequestCpu {
    component: Arc<str>,
    nanos: AtomicU64,
}

impl Drop for RequestCpu {
    fn drop(&mut self) {
        let seconds = std::time::Duration::from_nanos(*self.nanos.get_mut()).as_secs_f64();
        record_usage(&self.component, Some(seconds), None);
    }
}

/// A request in flight on a reused instance ([`WorkerCpu::request_started`]); dropping it
/// (the request was answered or expired) ends its share of the instance's CPU time.
pub struct InFlightRequest {
    worker: Arc<WorkerCpu>,
    request: Arc<RequestCpu>,
}

impl Drop for InFlightRequest {
    fn drop(&mut self) {
        self.worker.mark();
        let mut clock = self.worker.lock();
        clock.in_flight.retain(|r| !Arc::ptr_eq(r, &self.request));
    }
}

impl WorkerCpu {
    /// An account for one reused instance of component `component`, or `None` when usage is
    /// not recorded (the default: no cost).
    pub fn start(component: &str) -> Option<Arc<WorkerCpu>> {
        usage_recorded().then(|| {
            Arc::new(WorkerCpu {
                component: component.into(),
                clock: Default::default(),
            })
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WorkerClock> {
        self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A point inside a poll of the instance's worker: the CPU time since the poll's last
    /// mark is counted.
    pub fn mark(&self) {
        let (now, me) = (thread_cpu_nanos(), std::thread::current().id());
        let mut clock = self.lock();
        if clock.blind {
            return;
        }
        if let Some((thread, then)) = clock.open {
            if thread == me {
                clock.credit(now.saturating_sub(then));
            }
        }
        clock.open = Some((me, now));
    }

    /// The worker's poll ends (its expiration is polled last): counts up to here; the next
    /// poll starts unmeasured, and when a request started in this one, the worker polls its
    /// instance once more before returning, so the poll after that is not counted either.
    pub fn poll_ended(&self) {
        self.mark();
        let mut clock = self.lock();
        clock.open = None;
        clock.blind = std::mem::take(&mut clock.accepted);
    }

    /// A request starts on the instance; it is in flight until the returned guard drops.
    pub fn request_started(self: &Arc<Self>) -> InFlightRequest {
        self.mark();
        let mut clock = self.lock();
        let request = Arc::new(RequestCpu {
            component: self.component.clone(),
            nanos: AtomicU64::new(std::mem::take(&mut clock.unattributed)),
        });
        clock.accepted = true;
        clock.in_flight.push(request.clone());
        let previous = clock.latest.replace(request.clone());
        drop(clock);
        drop(previous);
        InFlightRequest {
            worker: self.clone(),
            request,
        }
    }
}

impl CpuAccount for WorkerCpu {
    fn add_cpu(&self, nanos: u64) {
        self.lock().credit(nanos);
    }
}

/// Serves `metrics` at `GET /metrics` on `addr` until the process ends. The first registry
/// served also receives the process's per-component usage ([`InstanceUsage`]).
pub async fn serve(metrics: Arc<Metrics>, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    use http_body_util::Full;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({METRICS_ADDR_ENV})"))?;
    let local = listener.local_addr()?;
    let _ = USAGE_SINK.set(metrics.clone());
    tracing::info!("metrics on http://{local}/metrics");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let m = metrics.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                    let m = m.clone();
                    async move {
                        let resp = if req.uri().path() == "/metrics" {
                            http::Response::builder()
                                .header(
                                    http::header::CONTENT_TYPE,
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                )
                                .body(Full::new(bytes::Bytes::from(m.encode())))
                        } else {
                            http::Response::builder()
                                .status(404)
                                .body(Full::new(bytes::Bytes::new()))
                        };
                        resp
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(local)
}
