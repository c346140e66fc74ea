//! The runtime `options` containerd hands the shim (runc `Options` protobuf, or CRI's
//! `runtimeoptions.v1.Options` with a TOML body, bare or as `start`'s stdin): never a panic
//! on any bytes.
#![no_main]

use containerd_shim_protos::protobuf::well_known_types::any::Any;
use libfuzzer_sys::fuzz_target;

const TYPE_URLS: [&str; 4] = [
    "containerd.runc.v1.Options",
    "runtimeoptions.v1.Options",
    "io.containerd.runc.v2.options",
    "",
];

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let any = Any {
        type_url: TYPE_URLS[data[0] as usize % TYPE_URLS.len()].to_string(),
        value: data[1..].to_vec(),
        ..Default::default()
    };
    let _ = cgroup_placement::systemd_option(Some(&any));
    let _ = cgroup_placement::decode_start_stdin(data);
    if let Ok(body) = std::str::from_utf8(&data[1..]) {
        let _ = cgroup_placement::systemd_cgroup_option(body);
    }
});
