//! The OTLP exporter settings of one signal, read from the `OTEL_*` variables as the
//! OpenTelemetry SDKs and Spin read them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use spin_shim_settings::container;

/// A telemetry signal: each has its own exporter and may have its own endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Spans.
    Traces,
    /// Counters and histograms.
    Metrics,
    /// Log records (the app's standard output and error, as Spin exports them).
    Logs,
}

impl Signal {
    /// The signal's part of the variable names (`TRACES` in `OTEL_EXPORTER_OTLP_TRACES_*`).
    pub fn var_part(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
            Signal::Logs => "LOGS",
        }
    }

    /// The OTLP/HTTP path appended to a base endpoint.
    pub fn http_path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
            Signal::Logs => "/v1/logs",
        }
    }

    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
        }
    }

    /// The batch delay or export interval variable, and its default (the SDK defaults).
    fn interval_var(self) -> (&'static str, u64) {
        match self {
            Signal::Traces => ("OTEL_BSP_SCHEDULE_DELAY", 5000),
            Signal::Metrics => ("OTEL_METRIC_EXPORT_INTERVAL", 60000),
            Signal::Logs => ("OTEL_BLRP_SCHEDULE_DELAY", 1000),
        }
    }
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (`grpc`).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`).
    HttpProtobuf,
}

/// TLS settings for an `https://` endpoint (PEM files). The server is verified against the
/// Mozilla roots (webpki-roots) and, when given, the `certificate` file's CAs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// `OTEL_EXPORTER_OTLP_[SIGNAL_]CERTIFICATE`: CA certificates to trust.
    pub ca: Option<PathBuf>,
    /// `OTEL_EXPORTER_OTLP_[SIGNAL_]CLIENT_CERTIFICATE`: the client's certificate chain.
    pub client_cert: Option<PathBuf>,
    /// `OTEL_EXPORTER_OTLP_[SIGNAL_]CLIENT_KEY`: the client's private key.
    pub client_key: Option<PathBuf>,
}

/// What the `OTEL_*` variables ask of one signal's exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The signal.
    pub signal: Signal,
    /// Where data is sent (for HTTP the full URL, e.g. `.../v1/traces`).
    pub endpoint: String,
    /// The transport.
    pub protocol: Protocol,
    /// Extra request headers (metadata for gRPC).
    pub headers: Vec<(String, String)>,
    /// TLS settings; `None` for a plain `http://` endpoint.
    pub tls: Option<Tls>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Other resource attributes from `OTEL_RESOURCE_ATTRIBUTES`.
    pub resource: Vec<(String, String)>,
    /// Batch delay (traces, logs) or export interval (metrics).
    pub schedule_delay: Duration,
    /// Span filter (an `EnvFilter` directive string; traces only).
    pub level: String,
}

fn non_empty(get: &dyn Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    get(key).filter(|v| !v.trim().is_empty())
}

/// `k=v,k2=v2` with percent-encoded values (the OTel SDK environment format).
pub(crate) fn key_values(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), percent_decode(v.trim())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The signal-specific variable if set, else the general one: `(name used, value)`.
fn signal_or_general(
    get: &dyn Fn(&str) -> Option<String>,
    signal: Signal,
    suffix: &str,
) -> Option<(String, String)> {
    let specific = format!("OTEL_EXPORTER_OTLP_{}_{suffix}", signal.var_part());
    let general = format!("OTEL_EXPORTER_OTLP_{suffix}");
    non_empty(get, &specific)
        .map(|v| (specific, v))
        .or_else(|| non_empty(get, &general).map(|v| (general, v)))
}

impl OtlpConfig {
    /// The traces exporter's configuration (see [`Self::for_signal`]).
    pub fn from_lookup(
        get: &dyn Fn(&str) -> Option<String>,
        default_service: &str,
    ) -> anyhow::Result<Option<OtlpConfig>> {
        Self::for_signal(get, Signal::Traces, default_service)
    }

    /// Reads `signal`'s configuration through `get` (a variable lookup). `Ok(None)`: the
    /// signal is off (no endpoint for it, or `OTEL_SDK_DISABLED=true`). Errors name the
    /// variable and the accepted values.
    pub fn for_signal(
        get: &dyn Fn(&str) -> Option<String>,
        signal: Signal,
        default_service: &str,
    ) -> anyhow::Result<Option<OtlpConfig>> {
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let sig = signal.var_part();
        let specific = non_empty(get, &format!("OTEL_EXPORTER_OTLP_{sig}_ENDPOINT"));
        let base = non_empty(get, "OTEL_EXPORTER_OTLP_ENDPOINT");
        if specific.is_none() && base.is_none() {
            return Ok(None);
        }
        let (var, protocol) = signal_or_general(get, signal, "PROTOCOL")
            .unwrap_or_else(|| ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/protobuf".into()));
        let protocol = match protocol.trim() {
            "grpc" => Protocol::Grpc,
            "http/protobuf" => Protocol::HttpProtobuf,
            other => bail!(
                "{var}={other:?} is not supported: use `grpc` or `http/protobuf` (`http/json` is \
                 not implemented)"
            ),
        };
        let endpoint = match (specific, protocol) {
            (Some(e), _) => e,
            (None, Protocol::Grpc) => base.unwrap_or_default(),
            (None, Protocol::HttpProtobuf) => format!(
                "{}{}",
                base.unwrap_or_default().trim().trim_end_matches('/'),
                signal.http_path()
            ),
        };
        let endpoint = endpoint.trim().to_string();
        let what = signal.name();
        let uri: http::Uri = endpoint.parse().with_context(|| {
            format!("OTLP {what} endpoint {endpoint:?} is not a URL (e.g. http://collector:4318)")
        })?;
        if uri.host().is_none_or(str::is_empty) {
            bail!("OTLP {what} endpoint {endpoint:?} has no host (e.g. http://collector:4318)");
        }
        let tls = match uri.scheme_str() {
            Some("http") => None,
            Some("https") => {
                let file = |suffix: &str| {
                    signal_or_general(get, signal, suffix).map(|(var, v)| (var, PathBuf::from(v)))
                };
                let ca = file("CERTIFICATE");
                let cert = file("CLIENT_CERTIFICATE");
                let key = file("CLIENT_KEY");
                for (var, path) in [&ca, &cert, &key].into_iter().flatten() {
                    if !path.is_file() {
                        bail!(
                            "{var}={}: no such file (a PEM file readable by the runtime)",
                            path.display()
                        );
                    }
                }
                if cert.is_some() != key.is_some() {
                    bail!(
                        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY \
                         (or their {sig} forms) must be set together for client authentication"
                    );
                }
                Some(Tls {
                    ca: ca.map(|c| c.1),
                    client_cert: cert.map(|c| c.1),
                    client_key: key.map(|c| c.1),
                })
            }
            _ => bail!("OTLP {what} endpoint {endpoint:?} must start with http:// or https://"),
        };
        let mut headers = Vec::new();
        for var in [
            "OTEL_EXPORTER_OTLP_HEADERS".to_string(),
            format!("OTEL_EXPORTER_OTLP_{sig}_HEADERS"),
        ] {
            if let Some(v) = non_empty(get, &var) {
                for (k, v) in key_values(&v) {
                    headers.retain(|(h, _): &(String, String)| !h.eq_ignore_ascii_case(&k));
                    headers.push((k, v));
                }
            }
        }
        let mut resource = non_empty(get, "OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| key_values(&v))
            .unwrap_or_default();
        let from_attrs = resource
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| resource.remove(i).1);
        let service_name = non_empty(get, "OTEL_SERVICE_NAME")
            .or(from_attrs)
            .unwrap_or_else(|| default_service.to_string());
        let (delay_var, delay_default) = signal.interval_var();
        let schedule_delay = match non_empty(get, delay_var) {
            None => Duration::from_millis(delay_default),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => bail!("{delay_var}={v:?} is not a positive number of milliseconds"),
            },
        };
        let level =
            non_empty(get, container::OTEL_TRACING_LEVEL).unwrap_or_else(|| "info".to_string());
        Ok(Some(OtlpConfig {
            signal,
            endpoint,
            protocol,
            headers,
            tls,
            service_name,
            resource,
            schedule_delay,
            level,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg_for(vars: &[(&str, &str)], signal: Signal) -> anyhow::Result<Option<OtlpConfig>> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OtlpConfig::for_signal(&|k| m.get(k).cloned(), signal, "spin")
    }

    fn cfg(vars: &[(&str, &str)]) -> anyhow::Result<Option<OtlpConfig>> {
        cfg_for(vars, Signal::Traces)
    }

    #[test]
    fn off_without_endpoint_or_when_disabled() {
        assert_eq!(cfg(&[]).unwrap(), None);
        assert_eq!(cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap(), None);
        assert_eq!(
            cfg(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SDK_DISABLED", "true")
            ])
            .unwrap(),
            None
        );
        // A signal's own endpoint turns on that signal only.
        let only_logs = [("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://l:1/v1/logs")];
        assert_eq!(cfg(&only_logs).unwrap(), None);
        assert_eq!(cfg_for(&only_logs, Signal::Metrics).unwrap(), None);
        assert_eq!(
            cfg_for(&only_logs, Signal::Logs).unwrap().unwrap().endpoint,
            "http://l:1/v1/logs"
        );
    }

    #[test]
    fn endpoints_protocols_headers_and_resource() {
        let c = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://c:4318/v1/traces");
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.service_name, "spin");
        assert_eq!(c.tls, None);
        let base = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        assert_eq!(
            cfg_for(&base, Signal::Metrics).unwrap().unwrap().endpoint,
            "http://c:4318/v1/metrics"
        );
        let logs = cfg_for(&base, Signal::Logs).unwrap().unwrap();
        assert_eq!(logs.endpoint, "http://c:4318/v1/logs");
        assert_eq!(logs.schedule_delay, Duration::from_millis(1000));
        let c = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=x%20y"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "A=2"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=shop,k8s.pod.name=p",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://c:4317");
        assert_eq!(c.protocol, Protocol::Grpc);
        assert_eq!(
            c.headers,
            vec![("b".into(), "x y".into()), ("A".into(), "2".into())]
        );
        assert_eq!(c.service_name, "shop");
        assert_eq!(c.resource, vec![("k8s.pod.name".into(), "p".into())]);
        let c = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/x"),
            ("OTEL_SERVICE_NAME", "svc"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.service_name.as_str()),
            ("http://t:9/x", "svc")
        );
        // A signal's own protocol wins over the general one.
        let m = cfg_for(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "250"),
            ],
            Signal::Metrics,
        )
        .unwrap()
        .unwrap();
        assert_eq!(m.protocol, Protocol::HttpProtobuf);
        assert_eq!(m.endpoint, "http://c:4317/v1/metrics");
        assert_eq!(m.schedule_delay, Duration::from_millis(250));
    }

    #[test]
    fn https_endpoints_take_certificate_files() {
        let dir = std::env::temp_dir().join(format!("otel-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "pem").unwrap();
        let ca_s = ca.to_str().unwrap();
        let c = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca_s),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "https://c:4318/v1/traces");
        assert_eq!(
            c.tls,
            Some(Tls {
                ca: Some(ca.clone()),
                ..Tls::default()
            })
        );
        // Without a CA file the public roots verify the collector.
        let c = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")])
            .unwrap()
            .unwrap();
        assert_eq!(c.tls, Some(Tls::default()));
        let e = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                "/nonexistent/ca.pem",
            ),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=/nonexistent/ca.pem"),
            "{e}"
        );
        let e = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", ca_s),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("must be set together"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{e}");
        let e = cfg_for(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "udp"),
            ],
            Signal::Logs,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"),
            "{e}"
        );
        let e = cfg(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")]).unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
        let e = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("OTEL_BSP_SCHEDULE_DELAY"), "{e}");
        let e = cfg_for(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
            ],
            Signal::Metrics,
        )
        .unwrap_err();
        assert!(e.to_string().contains("OTEL_METRIC_EXPORT_INTERVAL"), "{e}");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Cb%"), "a,b%");
    }
}
