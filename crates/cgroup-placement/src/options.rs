//! The containerd runtime options that feed the placement decision ([`crate::decide`]'s
//! `systemd_option`).

use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::{self as protobuf, Message};

use crate::PlacementError;

fn invalid(e: anyhow::Error) -> PlacementError {
    PlacementError::InvalidOptions {
        reason: format!("{e:#}"),
    }
}

/// Reads `SystemdCgroup` from the runtime options containerd passes (runc-style
/// `containerd.runc.v1.Options`, or CRI's `runtimeoptions.v1.Options` with a TOML body).
pub fn systemd_option(options: Option<&Any>) -> Result<Option<bool>, PlacementError> {
    let Some(any) = options else { return Ok(None) };
    if any.type_url.ends_with("runtimeoptions.v1.Options") {
        let body = runtimeoptions_config_body(&any.value).map_err(invalid)?;
        return crate::systemd_cgroup_option(&body);
    }
    if any.type_url.ends_with("runc.v1.Options") {
        let o = containerd_shim_protos::shim::oci::Options::parse_from_bytes(&any.value)
            .map_err(|e| invalid(anyhow::anyhow!("{}: {e}", any.type_url)))?;
        return Ok(Some(o.systemd_cgroup));
    }
    Ok(None)
}

/// Field 3 (`config_body`) of CRI's `runtimeoptions.v1.Options`.
fn runtimeoptions_config_body(bytes: &[u8]) -> anyhow::Result<String> {
    use protobuf::CodedInputStream;
    let mut is = CodedInputStream::from_bytes(bytes);
    let mut body = String::new();
    while let Some(tag) = is.read_raw_tag_or_eof()? {
        if tag >> 3 == 3 && tag & 7 == 2 {
            body = is.read_string()?;
        } else {
            is.skip_field(
                protobuf::rt::WireType::new(tag & 7).ok_or_else(|| {
                    anyhow::anyhow!("runtime options: bad wire type in tag {tag}")
                })?,
            )?;
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_runtimeoptions_body() {
        // runtimeoptions.v1.Options { type_url = "x" (1), config_body = "SystemdCgroup = true" (3) }
        let body = b"SystemdCgroup = true";
        let mut bytes = vec![0x0a, 1, b'x', 0x1a, body.len() as u8];
        bytes.extend_from_slice(body);
        assert_eq!(
            runtimeoptions_config_body(&bytes).unwrap(),
            "SystemdCgroup = true"
        );
        assert!(runtimeoptions_config_body(&[0x1a, 10, b'a']).is_err());
    }

    #[test]
    fn runc_options_systemd_flag() {
        let o = containerd_shim_protos::shim::oci::Options {
            systemd_cgroup: true,
            ..Default::default()
        };
        let any = Any {
            type_url: "containerd.runc.v1.Options".into(),
            value: o.write_to_bytes().unwrap(),
            ..Default::default()
        };
        assert_eq!(systemd_option(Some(&any)).unwrap(), Some(true));
        assert_eq!(systemd_option(None).unwrap(), None);
    }
}
