//! Prometheus metrics of one app, served on an opt-in address ([`METRICS_ADDR_ENV`]) at
//! `/metrics` in the text exposition format:
//! - `spin_http_requests_total{component,route,status}`;
//! - `spin_http_request_duration_seconds{component,route}` (histogram, 0.5 ms to ~16 s);
//! - `spin_http_requests_in_flight`;
//! - `spin_component_instantiations_total{component}`, `spin_component_traps_total{component}`;
//! - `spin_compile_cache_total{result="hit"|"miss"}` (components loaded at start).
//!
//! Every series carries `app` (the app name). Without the variable nothing is recorded
//! (the request path checks one `Option`).

use std::net::SocketAddr;
use std::sync::Arc;

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

/// The app's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram>,
    in_flight: Gauge,
    instantiations: Family<ComponentLabels, Counter>,
    traps: Family<ComponentLabels, Counter>,
    cache: Family<CacheLabels, Counter>,
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
        Arc::new(Metrics {
            registry: root,
            requests,
            duration,
            in_flight,
            instantiations,
            traps,
            cache,
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

    /// The text exposition of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Serves `metrics` at `GET /metrics` on `addr` until the process ends.
pub async fn serve(metrics: Arc<Metrics>, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    use http_body_util::Full;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({METRICS_ADDR_ENV})"))?;
    let local = listener.local_addr()?;
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
