//! The runtime `options` containerd passes: on the `start` subcommand's stdin and again in
//! every create request. One decoder serves both.
//!
//! containerd 1.6-2.2 marshal the runtime's options table as a protobuf `Any`: for runtime
//! types other than runc that is CRI's `runtimeoptions.v1.Options`, whose `config_body`
//! holds the table as TOML (`SystemdCgroup = true`; containerd 1.6 leaves the body empty,
//! 1.7 and later fill it in) or whose `config_path` names a TOML file; `ctr --runc-*` and
//! runc-style configs send `containerd.runc.v1.Options`. containerd 2.3 wraps the `Any` of
//! `start` in a `containerd.runtime.bootstrap.v1.BootstrapParams` extension.
//!
//! `containerd-shim` 0.11 would decode any of these as runc options and take field 3 (the
//! TOML body) as the shim's cgroup path, so the shim's `start` reads stdin itself and
//! decodes it with [`decode_start_stdin`]. Container placement follows each container's
//! `cgroupsPath`; `SystemdCgroup` ([`systemd_option`]) only matters when that is absent.

use std::io::Read;
use std::path::Path;

use containerd_shim_protos::protobuf::well_known_types::any::Any;
use prost::Message;

use crate::PlacementError;

/// Runtime options as decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeOptions {
    /// Type URL of the options message, empty when there were none.
    pub type_url: String,
    /// `SystemdCgroup` as given (runc's `systemd_cgroup`, or the TOML key).
    pub systemd_cgroup: Option<bool>,
    /// runc's `shim_cgroup`: the cgroup the shim process itself is placed in.
    pub shim_cgroup: Option<String>,
    /// Keys of a TOML options table this shim does not use (warned about, then ignored).
    pub ignored_keys: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct AnyMsg {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `runtimeoptions.v1.Options`.
#[derive(Clone, PartialEq, prost::Message)]
struct RuntimeOptionsMsg {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(string, tag = "2")]
    config_path: String,
    #[prost(bytes = "vec", tag = "3")]
    config_body: Vec<u8>,
}

/// The fields of `containerd.runc.v1.Options` a non-runc shim can honour.
#[derive(Clone, PartialEq, prost::Message)]
struct RuncOptionsMsg {
    #[prost(string, tag = "3")]
    shim_cgroup: String,
    #[prost(bool, tag = "9")]
    systemd_cgroup: bool,
}

/// `containerd.runtime.bootstrap.v1.BootstrapParams` (containerd 2.3), reduced to the
/// extensions that carry the runtime options.
#[derive(Clone, PartialEq, prost::Message)]
struct BootstrapParamsMsg {
    #[prost(string, tag = "1")]
    instance_id: String,
    #[prost(string, tag = "2")]
    namespace: String,
    #[prost(string, tag = "5")]
    containerd_ttrpc_address: String,
    #[prost(message, repeated, tag = "8")]
    extensions: Vec<ExtensionMsg>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ExtensionMsg {
    #[prost(message, optional, tag = "1")]
    value: Option<AnyMsg>,
}

const RUNTIME_OPTIONS: &str = "runtimeoptions.v1.Options";
const RUNC_OPTIONS: &str = "containerd.runc.v1.Options";

/// The message name of a type URL (`type.googleapis.com/x.y.Z` and `x.y.Z` both give `x.y.Z`).
fn message_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

fn known(type_url: &str) -> bool {
    matches!(message_name(type_url), RUNTIME_OPTIONS | RUNC_OPTIONS)
}

/// Decodes what `start` read from stdin. Empty input means no options. Options of a type
/// this shim does not know are ignored with a warning; a TOML body that is not TOML or
/// whose `SystemdCgroup` is not a boolean is an error naming the containerd setting.
pub fn decode_start_stdin(stdin: &[u8]) -> Result<RuntimeOptions, PlacementError> {
    if stdin.is_empty() {
        return Ok(RuntimeOptions::default());
    }
    let any = match AnyMsg::decode(stdin) {
        Ok(any) if known(&any.type_url) => any,
        first => match BootstrapParamsMsg::decode(stdin) {
            Ok(params)
                if !params.containerd_ttrpc_address.is_empty() || !params.extensions.is_empty() =>
            {
                match params
                    .extensions
                    .into_iter()
                    .filter_map(|e| e.value)
                    .find(|a| known(&a.type_url))
                {
                    Some(any) => any,
                    None => return Ok(RuntimeOptions::default()),
                }
            }
            _ => {
                let type_url = first.map(|a| a.type_url).unwrap_or_default();
                tracing::warn!(
                    "start: ignoring runtime options of unknown type {type_url:?} on stdin \
                     ({} bytes)",
                    stdin.len()
                );
                return Ok(RuntimeOptions {
                    type_url,
                    ..Default::default()
                });
            }
        },
    };
    let out = decode_any(&any.type_url, &any.value)?;
    if !out.ignored_keys.is_empty() {
        tracing::warn!(
            "start: runtime options {:?} are not used by this shim (only SystemdCgroup is)",
            out.ignored_keys
        );
    }
    Ok(out)
}

/// Decodes one options message given its type URL; unknown types give no options.
fn decode_any(type_url: &str, value: &[u8]) -> Result<RuntimeOptions, PlacementError> {
    let mut out = RuntimeOptions {
        type_url: type_url.to_string(),
        ..Default::default()
    };
    match message_name(type_url) {
        RUNC_OPTIONS => {
            let o = RuncOptionsMsg::decode(value)
                .map_err(|e| invalid(format!("bad {RUNC_OPTIONS} message ({e})")))?;
            out.systemd_cgroup = Some(o.systemd_cgroup);
            out.shim_cgroup = Some(o.shim_cgroup).filter(|s| !s.is_empty());
        }
        RUNTIME_OPTIONS => {
            let o = RuntimeOptionsMsg::decode(value)
                .map_err(|e| invalid(format!("bad {RUNTIME_OPTIONS} message ({e})")))?;
            let body = if o.config_path.is_empty() {
                String::from_utf8(o.config_body)
                    .map_err(|_| invalid("the options table is not UTF-8".into()))?
            } else {
                read_config_path(Path::new(&o.config_path))?
            };
            out.systemd_cgroup = crate::systemd_cgroup_option(&body)?;
            if let Ok(table) = body.parse::<toml::Table>() {
                out.ignored_keys = table
                    .keys()
                    .filter(|k| k.as_str() != "SystemdCgroup")
                    .cloned()
                    .collect();
            }
        }
        _ => {}
    }
    Ok(out)
}

/// A `ConfigPath` file is the node admin's; it is still read with a bound.
const MAX_CONFIG_FILE: u64 = 1 << 20;

fn read_config_path(path: &Path) -> Result<String, PlacementError> {
    let fail = |why: String| invalid(format!("cannot read ConfigPath {} ({why})", path.display()));
    let mut body = String::new();
    std::fs::File::open(path)
        .map_err(|e| fail(e.to_string()))?
        .take(MAX_CONFIG_FILE + 1)
        .read_to_string(&mut body)
        .map_err(|e| fail(e.to_string()))?;
    if body.len() as u64 > MAX_CONFIG_FILE {
        return Err(fail(format!("larger than {MAX_CONFIG_FILE} bytes")));
    }
    Ok(body)
}

fn invalid(reason: String) -> PlacementError {
    PlacementError::InvalidOptions { reason }
}

/// Reads `SystemdCgroup` from the runtime options of a create request (runc-style
/// `containerd.runc.v1.Options`, or CRI's `runtimeoptions.v1.Options` with a TOML body or
/// a `ConfigPath`); `None` when absent or of another type.
pub fn systemd_option(options: Option<&Any>) -> Result<Option<bool>, PlacementError> {
    let Some(any) = options else { return Ok(None) };
    Ok(decode_any(&any.type_url, &any.value)?.systemd_cgroup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(type_url: &str, value: Vec<u8>) -> Vec<u8> {
        AnyMsg {
            type_url: type_url.into(),
            value,
        }
        .encode_to_vec()
    }

    fn runtime_options(body: &str) -> Vec<u8> {
        any(
            RUNTIME_OPTIONS,
            RuntimeOptionsMsg {
                config_body: body.as_bytes().to_vec(),
                ..Default::default()
            }
            .encode_to_vec(),
        )
    }

    #[test]
    fn empty_stdin_and_empty_body() {
        assert_eq!(decode_start_stdin(b"").unwrap(), RuntimeOptions::default());
        // containerd 1.6: runtimeoptions without a body.
        let o = decode_start_stdin(&runtime_options("")).unwrap();
        assert_eq!((o.systemd_cgroup, o.shim_cgroup), (None, None));
    }

    #[test]
    fn spinkube_body_is_not_a_cgroup_path() {
        let bytes = runtime_options("SystemdCgroup = true\n");
        // What containerd-shim 0.11's `spawn` makes of these bytes (the reported failure).
        {
            use containerd_shim_protos::protobuf::{well_known_types::any::Any, Message as _};
            let any = Any::parse_from_bytes(&bytes).unwrap();
            let runc =
                containerd_shim_protos::shim::oci::Options::parse_from_bytes(&any.value).unwrap();
            assert_eq!(runc.shim_cgroup, "SystemdCgroup = true\n");
        }
        let o = decode_start_stdin(&bytes).unwrap();
        assert_eq!(o.systemd_cgroup, Some(true));
        assert_eq!(o.shim_cgroup, None);
        assert!(o.ignored_keys.is_empty());
        let o = decode_start_stdin(&runtime_options(
            "SystemdCgroup = false\nBinaryName = \"x\"\n",
        ))
        .unwrap();
        assert_eq!(o.systemd_cgroup, Some(false));
        assert_eq!(o.ignored_keys, vec!["BinaryName".to_string()]);
    }

    #[test]
    fn bad_bodies_name_the_setting() {
        let e = decode_start_stdin(&runtime_options("SystemdCgroup = ")).unwrap_err();
        assert!(format!("{e:#}").contains("not TOML"), "{e:#}");
        let e = decode_start_stdin(&runtime_options("SystemdCgroup = \"yes\"")).unwrap_err();
        assert!(format!("{e:#}").contains("SystemdCgroup"), "{e:#}");
    }

    #[test]
    fn config_path_is_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("opts.toml");
        std::fs::write(&p, "SystemdCgroup = true\n").unwrap();
        let msg = RuntimeOptionsMsg {
            config_path: p.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let o = decode_start_stdin(&any(RUNTIME_OPTIONS, msg.encode_to_vec())).unwrap();
        assert_eq!(o.systemd_cgroup, Some(true));
        let msg = RuntimeOptionsMsg {
            config_path: "/nonexistent/opts.toml".into(),
            ..Default::default()
        };
        let e = decode_start_stdin(&any(RUNTIME_OPTIONS, msg.encode_to_vec())).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/opts.toml"), "{e:#}");
    }

    #[test]
    fn runc_options_with_googleapis_prefix() {
        // Encoded with the rust-protobuf type containerd-shim ships (all fields).
        use containerd_shim_protos::protobuf::Message as _;
        let o = containerd_shim_protos::shim::oci::Options {
            systemd_cgroup: true,
            shim_cgroup: "/shims".into(),
            binary_name: "runc".into(),
            root: "/run/x".into(),
            ..Default::default()
        };
        let bytes = any(
            &format!("type.googleapis.com/{RUNC_OPTIONS}"),
            o.write_to_bytes().unwrap(),
        );
        let o = decode_start_stdin(&bytes).unwrap();
        assert_eq!(o.systemd_cgroup, Some(true));
        assert_eq!(o.shim_cgroup.as_deref(), Some("/shims"));
    }

    #[test]
    fn bootstrap_params_of_containerd_2_3() {
        let params = |ext: Vec<ExtensionMsg>| {
            BootstrapParamsMsg {
                instance_id: "0123abcd".into(),
                namespace: "k8s.io".into(),
                containerd_ttrpc_address: "/run/containerd/containerd.sock.ttrpc".into(),
                extensions: ext,
            }
            .encode_to_vec()
        };
        let ext = ExtensionMsg {
            value: Some(AnyMsg::decode(&runtime_options("SystemdCgroup = true\n")[..]).unwrap()),
        };
        assert_eq!(
            decode_start_stdin(&params(vec![ext]))
                .unwrap()
                .systemd_cgroup,
            Some(true)
        );
        assert_eq!(
            decode_start_stdin(&params(vec![])).unwrap(),
            RuntimeOptions::default()
        );
    }

    #[test]
    fn unknown_types_are_ignored() {
        let o = decode_start_stdin(&any("example.com/Other", vec![1, 2, 3])).unwrap();
        assert_eq!(o.type_url, "example.com/Other");
        assert_eq!((o.systemd_cgroup, o.shim_cgroup), (None, None));
    }

    #[test]
    fn runc_options_systemd_flag() {
        let o = containerd_shim_protos::shim::oci::Options {
            systemd_cgroup: true,
            ..Default::default()
        };
        let any = Any {
            type_url: "containerd.runc.v1.Options".into(),
            value: protobuf::Message::write_to_bytes(&o).unwrap(),
            ..Default::default()
        };
        assert_eq!(systemd_option(Some(&any)).unwrap(), Some(true));
        assert_eq!(systemd_option(None).unwrap(), None);
    }
}
