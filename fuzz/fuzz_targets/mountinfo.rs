//! `/proc/self/mountinfo` parsing into the host's cgroup layout: never a panic, and an
//! accepted host names only hierarchies that mountinfo listed.
#![no_main]

use cgroup_placement::{CgroupLayout, Host};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let Ok(text) = std::str::from_utf8(&data[1..]) else {
        return;
    };
    let (root_is_cgroup2, systemd) = (data[0] & 1 == 1, data[0] & 2 == 2);
    if let Ok(host) = Host::from_mountinfo(text, root_is_cgroup2, systemd) {
        match host.layout() {
            CgroupLayout::Unified => {
                assert!(host.unified_root().is_some() && host.v1_hierarchies().is_empty())
            }
            CgroupLayout::Hybrid => {
                assert!(host.unified_root().is_some() && !host.v1_hierarchies().is_empty())
            }
            CgroupLayout::Legacy => {
                assert!(host.unified_root().is_none() && !host.v1_hierarchies().is_empty())
            }
        }
        for (controllers, _) in host.v1_hierarchies() {
            assert!(!controllers.is_empty());
        }
    }
});
