//! An OTLP collector on loopback for tests: gRPC (tonic) and HTTP/protobuf (`POST
//! /v1/traces`, `/v1/metrics`, `/v1/logs`, hyper + prost), in plain text or TLS (optionally
//! requiring a client certificate), decoding with the published `opentelemetry-proto`
//! definitions. Shared by spin-runtime's and the integration suite's telemetry tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point;
use opentelemetry_proto::tonic::resource::v1::Resource;
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

/// How long a test waits for an export: generous, since CI machines are shared and noisy
/// (the wait ends as soon as the effect is seen).
const WAIT: Duration = Duration::from_secs(90);

fn text_of(v: Option<&AnyValue>) -> Option<String> {
    Some(match v?.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

fn attr_of(attrs: &[KeyValue], key: &str) -> Option<String> {
    text_of(attrs.iter().find(|a| a.key == key)?.value.as_ref())
}

fn service_of(r: Option<&Resource>) -> String {
    r.and_then(|r| attr_of(&r.attributes, "service.name"))
        .unwrap_or_default()
}

/// One data point of a sum (counter) as received.
#[derive(Debug, Clone)]
pub struct Point {
    /// `service.name` of the resource.
    pub service: String,
    /// The metric's name.
    pub metric: String,
    /// The point's attributes as text.
    pub attrs: Vec<(String, String)>,
    /// The value (integer sums).
    pub value: i64,
    /// Whether the sum is monotonic and cumulative (a counter).
    pub cumulative_counter: bool,
}

impl Point {
    /// An attribute's value.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One data point of a histogram as received.
#[derive(Debug, Clone)]
pub struct HistogramPoint {
    /// `service.name` of the resource.
    pub service: String,
    /// The metric's name.
    pub metric: String,
    /// The metric's unit.
    pub unit: String,
    /// The point's attributes as text.
    pub attrs: Vec<(String, String)>,
    /// Observations.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// Their largest, when sent.
    pub max: Option<f64>,
}

impl HistogramPoint {
    /// An attribute's value.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One log record as received.
#[derive(Debug, Clone)]
pub struct Log {
    /// `service.name` of the resource.
    pub service: String,
    /// The body as text.
    pub body: String,
    /// The record's attributes as text.
    pub attrs: Vec<(String, String)>,
}

impl Log {
    /// An attribute's value.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn attrs_text(attrs: &[KeyValue]) -> Vec<(String, String)> {
    attrs
        .iter()
        .map(|a| (a.key.clone(), text_of(a.value.as_ref()).unwrap_or_default()))
        .collect()
}

/// Everything received so far, by signal.
#[derive(Default)]
pub struct Store {
    spans: Mutex<Vec<Received>>,
    points: Mutex<Vec<Point>>,
    histograms: Mutex<Vec<HistogramPoint>>,
    logs: Mutex<Vec<Log>>,
    /// Export requests that carried a client certificate (TLS receivers only).
    pub exports: Mutex<usize>,
}

impl Store {
    /// The `service.name` of everything received.
    pub fn services(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .spans
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.service.clone())
            .collect();
        v.extend(
            self.points
                .lock()
                .unwrap()
                .iter()
                .map(|p| p.service.clone()),
        );
        v.extend(
            self.histograms
                .lock()
                .unwrap()
                .iter()
                .map(|p| p.service.clone()),
        );
        v.extend(self.logs.lock().unwrap().iter().map(|l| l.service.clone()));
        v.sort();
        v.dedup();
        v
    }

    /// Forgets everything received.
    pub fn clear(&self) {
        self.spans.lock().unwrap().clear();
        self.points.lock().unwrap().clear();
        self.histograms.lock().unwrap().clear();
        self.logs.lock().unwrap().clear();
    }
}

fn collect_metrics(store: &Store, req: ExportMetricsServiceRequest) {
    let mut out = store.points.lock().unwrap();
    let mut histograms = store.histograms.lock().unwrap();
    for rm in req.resource_metrics {
        let service = service_of(rm.resource.as_ref());
        for sm in rm.scope_metrics {
            for m in sm.metrics {
                if let Some(Data::Histogram(h)) = &m.data {
                    histograms.extend(h.data_points.iter().map(|p| HistogramPoint {
                        service: service.clone(),
                        metric: m.name.clone(),
                        unit: m.unit.clone(),
                        attrs: attrs_text(&p.attributes),
                        count: p.count,
                        sum: p.sum.unwrap_or(0.0),
                        max: p.max,
                    }));
                    continue;
                }
                let Some(Data::Sum(sum)) = m.data else {
                    continue;
                };
                for p in sum.data_points {
                    let value = match p.value {
                        Some(number_data_point::Value::AsInt(i)) => i,
                        Some(number_data_point::Value::AsDouble(d)) => d as i64,
                        None => 0,
                    };
                    out.push(Point {
                        service: service.clone(),
                        metric: m.name.clone(),
                        attrs: attrs_text(&p.attributes),
                        value,
                        // AGGREGATION_TEMPORALITY_CUMULATIVE = 2
                        cumulative_counter: sum.is_monotonic && sum.aggregation_temporality == 2,
                    });
                }
            }
        }
    }
}

fn collect_logs(store: &Store, req: ExportLogsServiceRequest) {
    let mut out = store.logs.lock().unwrap();
    for rl in req.resource_logs {
        let service = service_of(rl.resource.as_ref());
        for sl in rl.scope_logs {
            for r in sl.log_records {
                out.push(Log {
                    service: service.clone(),
                    body: text_of(r.body.as_ref()).unwrap_or_default(),
                    attrs: attrs_text(&r.attributes),
                });
            }
        }
    }
}

/// One received span with the `service.name` of its resource.
#[derive(Debug, Clone)]
pub struct Received {
    /// `service.name` of the span's resource.
    pub service: String,
    /// The span as received.
    pub span: opentelemetry_proto::tonic::trace::v1::Span,
}

impl Received {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<String> {
        attr_of(&self.span.attributes, key)
    }
}

fn collect(store: &Store, req: ExportTraceServiceRequest) {
    let mut out = store.spans.lock().unwrap();
    for rs in req.resource_spans {
        let service = service_of(rs.resource.as_ref());
        for ss in rs.scope_spans {
            for span in ss.spans {
                out.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
}

struct Grpc(Arc<Store>);

/// Counts an export that came with a verified client certificate.
fn note_client_cert<T>(store: &Store, request: &tonic::Request<T>) {
    if request.peer_certs().is_some_and(|certs| !certs.is_empty()) {
        *store.exports.lock().unwrap() += 1;
    }
}

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        note_client_cert(&self.0, &request);
        collect(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        note_client_cert(&self.0, &request);
        collect_metrics(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        note_client_cert(&self.0, &request);
        collect_logs(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

/// PEM files for a TLS collector: its certificate and key, and the CA whose client
/// certificates it requires (`None`: no client authentication).
pub struct TlsFiles<'a> {
    /// Server certificate chain (PEM).
    pub cert: &'a Path,
    /// Server private key (PEM).
    pub key: &'a Path,
    /// CA of required client certificates.
    pub client_ca: Option<&'a Path>,
}

/// Decodes one OTLP/HTTP request body into the store; `false` for an unknown path or type.
fn http_export(store: &Store, path: &str, content_type: Option<&[u8]>, body: bytes::Bytes) -> bool {
    if content_type != Some(b"application/x-protobuf") {
        return false;
    }
    match path {
        "/v1/traces" => prost::Message::decode(body)
            .map(|m| collect(store, m))
            .is_ok(),
        "/v1/metrics" => prost::Message::decode(body)
            .map(|m| collect_metrics(store, m))
            .is_ok(),
        "/v1/logs" => prost::Message::decode(body)
            .map(|m| collect_logs(store, m))
            .is_ok(),
        _ => false,
    }
}

async fn serve_http<S>(conn: S, store: Arc<Store>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let store = store.clone();
        async move {
            use http_body_util::BodyExt;
            let path = req.uri().path().to_string();
            let ct = req
                .headers()
                .get("content-type")
                .map(|v| v.as_bytes().to_vec());
            let body = req.into_body().collect().await?.to_bytes();
            let status = if http_export(&store, &path, ct.as_deref(), body) {
                200
            } else {
                400
            };
            Ok::<_, hyper::Error>(
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/x-protobuf")
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap(),
            )
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(conn), svc)
        .await;
}

fn rustls_server(tls: &TlsFiles) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<_> = CertificateDer::pem_file_iter(tls.cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(tls.key).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match tls.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(builder.with_single_cert(certs, key).unwrap())
}

/// An OTLP collector on loopback: gRPC and HTTP/protobuf.
pub struct Collector {
    /// The OTLP/gRPC endpoint.
    pub grpc: SocketAddr,
    /// The OTLP/HTTP endpoint (base URL; data goes to `/v1/<signal>`).
    pub http: SocketAddr,
    /// What was received.
    pub store: Arc<Store>,
    _rt: tokio::runtime::Runtime,
}

impl Collector {
    /// Starts both receivers on free loopback ports, in plain text.
    pub fn start() -> Collector {
        Self::start_with(None)
    }

    /// Starts both receivers on free loopback ports, over TLS when `tls` is given.
    pub fn start_with(tls: Option<TlsFiles>) -> Collector {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store: Arc<Store> = Arc::default();
        let (grpc, http) = rt.block_on(async {
            let g = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let h = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            (g, h)
        });
        let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
        let mut server = tonic::transport::Server::builder();
        if let Some(t) = &tls {
            let read = |p: &Path| std::fs::read(p).unwrap();
            let mut config = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(read(t.cert), read(t.key)),
            );
            if let Some(ca) = t.client_ca {
                config = config.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)));
            }
            server = server.tls_config(config).unwrap();
        }
        let s = store.clone();
        let router = server
            .add_service(TraceServiceServer::new(Grpc(s.clone())))
            .add_service(MetricsServiceServer::new(Grpc(s.clone())))
            .add_service(LogsServiceServer::new(Grpc(s)));
        rt.spawn(async move {
            router
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc))
                .await
        });
        let acceptor = tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(rustls_server(t)));
        let s = store.clone();
        rt.spawn(async move {
            loop {
                let Ok((conn, _)) = http.accept().await else {
                    return;
                };
                let s = s.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        None => serve_http(conn, s).await,
                        Some(a) => {
                            let Ok(tls) = a.accept(conn).await else {
                                return;
                            };
                            if tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .is_some_and(|c| !c.is_empty())
                            {
                                *s.exports.lock().unwrap() += 1;
                            }
                            serve_http(tls, s).await
                        }
                    }
                });
            }
        });
        Collector {
            grpc: grpc_addr,
            http: http_addr,
            store,
            _rt: rt,
        }
    }

    /// Waits (bounded) until `pred` holds for the received spans.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let t0 = Instant::now();
        loop {
            let spans = self.store.spans.lock().unwrap().clone();
            if pred(&spans) {
                return spans;
            }
            if t0.elapsed() > WAIT {
                let names: Vec<_> = spans.iter().map(|s| s.span.name.clone()).collect();
                panic!(
                    "no {what} within {} s; received spans: {names:?}",
                    WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (bounded) until `pred` holds for the received metric points.
    pub fn wait_for_points(&self, what: &str, pred: impl Fn(&[Point]) -> bool) -> Vec<Point> {
        let t0 = Instant::now();
        loop {
            let points = self.store.points.lock().unwrap().clone();
            if pred(&points) {
                return points;
            }
            if t0.elapsed() > WAIT {
                panic!(
                    "no {what} within {} s; received points: {points:?}",
                    WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (bounded) until `pred` holds for the received histogram points.
    pub fn wait_for_histograms(
        &self,
        what: &str,
        pred: impl Fn(&[HistogramPoint]) -> bool,
    ) -> Vec<HistogramPoint> {
        let t0 = Instant::now();
        loop {
            let points = self.store.histograms.lock().unwrap().clone();
            if pred(&points) {
                return points;
            }
            if t0.elapsed() > WAIT {
                panic!(
                    "no {what} within {} s; received histograms: {points:?}",
                    WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (bounded) until `pred` holds for the received log records.
    pub fn wait_for_logs(&self, what: &str, pred: impl Fn(&[Log]) -> bool) -> Vec<Log> {
        let t0 = Instant::now();
        loop {
            let logs = self.store.logs.lock().unwrap().clone();
            if pred(&logs) {
                return logs;
            }
            if t0.elapsed() > WAIT {
                panic!(
                    "no {what} within {} s; received logs: {logs:?}",
                    WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The latest cumulative value of counter `metric` whose attributes include `attrs`.
    pub fn counter(&self, metric: &str, attrs: &[(&str, &str)]) -> Option<i64> {
        latest(&self.store.points.lock().unwrap(), metric, attrs)
    }
}

/// Spin 3.6's per-component histograms (one observation per instance, or per request of a
/// reused WASIp3 instance).
pub const COMPONENT_HISTOGRAMS: [&str; 3] = [
    "spin.component_cpu_time",
    "spin.component_memory_used_on_init",
    "spin.component_memory_used",
];

/// Whether `h` holds an observation of each of [`COMPONENT_HISTOGRAMS`] for component
/// `component` of service `service`.
pub fn has_component_histograms(h: &[HistogramPoint], component: &str, service: &str) -> bool {
    COMPONENT_HISTOGRAMS.iter().all(|n| {
        h.iter().any(|p| {
            p.metric == *n
                && p.attr("component_id") == Some(component)
                && p.service == service
                && p.count >= 1
        })
    })
}

/// The latest cumulative value among `points` of counter `metric` with `attrs`.
pub fn latest(points: &[Point], metric: &str, attrs: &[(&str, &str)]) -> Option<i64> {
    points
        .iter()
        .rev()
        .find(|p| p.metric == metric && attrs.iter().all(|(k, v)| p.attr(k) == Some(*v)))
        .map(|p| p.value)
}
