//! An OTLP trace collector on loopback for tests: gRPC (tonic) and HTTP/protobuf
//! (`POST /v1/traces`, hyper + prost), decoding with the published `opentelemetry-proto`
//! definitions. Shared by spin-runtime's and the integration suite's telemetry tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

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
        self.span
            .attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.as_ref())
            .map(|v| match v {
                Value::StringValue(s) => s.clone(),
                Value::IntValue(i) => i.to_string(),
                Value::BoolValue(b) => b.to_string(),
                Value::DoubleValue(d) => d.to_string(),
                other => format!("{other:?}"),
            })
    }
}

/// Everything received so far.
pub type Spans = Arc<Mutex<Vec<Received>>>;

fn collect(spans: &Spans, req: ExportTraceServiceRequest) {
    let mut out = spans.lock().unwrap();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|a| a.key == "service.name")
            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
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

struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        collect(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP collector on loopback: gRPC and HTTP/protobuf (`POST /v1/traces`).
pub struct Collector {
    /// The OTLP/gRPC endpoint.
    pub grpc: SocketAddr,
    /// The OTLP/HTTP endpoint (base URL; spans go to `/v1/traces`).
    pub http: SocketAddr,
    /// What was received.
    pub spans: Spans,
    _rt: tokio::runtime::Runtime,
}

impl Collector {
    /// Starts both receivers on free loopback ports.
    pub fn start() -> Collector {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let spans: Spans = Arc::default();
        let (grpc, http) = rt.block_on(async {
            let g = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let h = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            (g, h)
        });
        let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
        let s = spans.clone();
        rt.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Grpc(s)))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc))
                .await
        });
        let s = spans.clone();
        rt.spawn(async move {
            loop {
                let Ok((conn, _)) = http.accept().await else {
                    return;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let s = s.clone();
                            async move {
                                use http_body_util::BodyExt;
                                let ok = req.uri().path() == "/v1/traces"
                                    && req.headers().get("content-type").map(|v| v.as_bytes())
                                        == Some(b"application/x-protobuf");
                                let body = req.into_body().collect().await?.to_bytes();
                                let status = match (ok, prost::Message::decode(body)) {
                                    (true, Ok(msg)) => {
                                        collect(&s, msg);
                                        200
                                    }
                                    _ => 400,
                                };
                                Ok::<_, hyper::Error>(
                                    http::Response::builder()
                                        .status(status)
                                        .header("content-type", "application/x-protobuf")
                                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(conn), svc)
                        .await;
                });
            }
        });
        Collector {
            grpc: grpc_addr,
            http: http_addr,
            spans,
            _rt: rt,
        }
    }

    /// Waits (bounded) until `pred` holds for the received spans.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let t0 = Instant::now();
        loop {
            let spans = self.spans.lock().unwrap().clone();
            if pred(&spans) {
                return spans;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let names: Vec<_> = spans.iter().map(|s| s.span.name.clone()).collect();
                panic!("no {what} within 20 s; received spans: {names:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
