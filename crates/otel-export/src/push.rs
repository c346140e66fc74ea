//! Guests' own metrics (`wasi:otel/metrics.export`): sent as one OTLP
//! `ExportMetricsServiceRequest` to the metrics endpoint the `OTEL_*` variables name, over
//! the same transport as the runtime's own metrics (gRPC or HTTP/protobuf, TLS, headers).
//! The SDK lets no outside code build its metric data, so the message is built by the
//! caller from the published protobuf definitions and sent as is.

use std::sync::OnceLock;

use opentelemetry_http::HttpClient as _;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use crate::config::{OtlpConfig, Protocol};
use crate::transport::{self, grpc_metadata, http_client, OtlpHttpClient, EXPORT_TIMEOUT};

/// How guest metrics reach the collector.
enum Route {
    Http(OtlpHttpClient),
    Grpc(tonic::transport::Channel),
}

struct Pusher {
    config: OtlpConfig,
    route: Route,
    handle: tokio::runtime::Handle,
}

static PUSHER: OnceLock<Pusher> = OnceLock::new();

/// Sets up the route for guest metrics from the metrics exporter's `config` (once, when
/// the metrics exporter starts).
pub(crate) fn install(config: &OtlpConfig) -> anyhow::Result<()> {
    let handle = transport::export_runtime()?.handle().clone();
    let route = match config.protocol {
        Protocol::HttpProtobuf => Route::Http(http_client(config, &handle)?),
        Protocol::Grpc => {
            let _guard = handle.enter();
            let mut endpoint = tonic::transport::Endpoint::from_shared(config.endpoint.clone())?
                .timeout(EXPORT_TIMEOUT);
            if let Some(tls) = &config.tls {
                endpoint = endpoint.tls_config(transport::tonic_tls(tls)?)?;
            }
            Route::Grpc(endpoint.connect_lazy())
        }
    };
    let _ = PUSHER.set(Pusher {
        config: config.clone(),
        route,
        handle,
    });
    Ok(())
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// The runtime's resource (`service.name`, `OTEL_RESOURCE_ATTRIBUTES`) under the guest's
/// own attributes: a key the guest sets wins, as in Spin, which exports the guest's
/// resource as given.
fn merge_resource(config: &OtlpConfig, guest: Option<Resource>) -> Resource {
    let mut resource = guest.unwrap_or_default();
    let ours = std::iter::once(("service.name", config.service_name.as_str())).chain(
        config
            .resource
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    for (k, v) in ours {
        if !resource.attributes.iter().any(|a| a.key == k) {
            resource.attributes.push(text(k, v));
        }
    }
    resource
}

/// Whether guest metrics go anywhere (the metrics exporter is on).
pub fn enabled() -> bool {
    PUSHER.get().is_some()
}

/// Sends a guest's metrics to the collector and waits for its answer. Nothing is sent
/// while metrics are off (`Ok`, as in Spin). The error names the endpoint and the reason.
pub async fn export(mut request: ExportMetricsServiceRequest) -> Result<(), String> {
    let Some(p) = PUSHER.get() else {
        return Ok(());
    };
    for rm in &mut request.resource_metrics {
        rm.resource = Some(merge_resource(&p.config, rm.resource.take()));
    }
    let endpoint = p.config.endpoint.clone();
    let failed = |e: String| format!("exporting metrics to {endpoint} failed: {e}");
    match &p.route {
        Route::Http(client) => {
            let mut builder = http::Request::post(&p.config.endpoint)
                .header(http::header::CONTENT_TYPE, "application/x-protobuf");
            for (k, v) in &p.config.headers {
                builder = builder.header(k, v);
            }
            let req = builder
                .body(request.encode_to_vec().into())
                .map_err(|e| failed(e.to_string()))?;
            let resp = client
                .send_bytes(req)
                .await
                .map_err(|e| failed(e.to_string()))?;
            if !resp.status().is_success() {
                return Err(failed(format!("the collector answered {}", resp.status())));
            }
            Ok(())
        }
        Route::Grpc(channel) => {
            let metadata = grpc_metadata(&p.config).map_err(|e| failed(format!("{e:#}")))?;
            let mut client = MetricsServiceClient::new(channel.clone());
            let call = p.handle.spawn(async move {
                let mut req = tonic::Request::new(request);
                *req.metadata_mut() = metadata;
                client.export(req).await.map(|_| ())
            });
            match call.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(status)) => {
                    Err(failed(format!("{:?}: {}", status.code(), status.message())))
                }
                Err(e) => Err(failed(e.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_resource_keys_win_and_ours_fill_in() {
        let config = OtlpConfig {
            signal: crate::config::Signal::Metrics,
            endpoint: "http://127.0.0.1:4318/v1/metrics".into(),
            protocol: Protocol::HttpProtobuf,
            headers: Vec::new(),
            tls: None,
            service_name: "app".into(),
            resource: vec![("deployment.environment".into(), "test".into())],
            schedule_delay: std::time::Duration::from_secs(1),
            level: "info".into(),
        };
        let guest = Resource {
            attributes: vec![text("service.name", "guest")],
            ..Default::default()
        };
        let r = merge_resource(&config, Some(guest));
        let keys: Vec<_> = r.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["service.name", "deployment.environment"]);
        assert_eq!(r.attributes[0], text("service.name", "guest"));
        let r = merge_resource(&config, None);
        assert_eq!(r.attributes[0], text("service.name", "app"));
    }
}
