//! `linux.cgroupsPath` parsing and the placement decision: never a panic, and an accepted
//! path never leaves the hierarchy (no `..`, components within NAME_MAX, below every root).
#![no_main]

use std::path::{Component, Path};
use std::sync::OnceLock;

use cgroup_placement::{decide, parse_cgroups_path, Host, MAX_COMPONENT_LEN};
use libfuzzer_sys::fuzz_target;

/// This project's hybrid test host (v1 controllers plus the unified hierarchy).
const MOUNTINFO: &str = include_str!("../../crates/cgroup-placement/tests/fixtures/mountinfo/hybrid-this-host.txt");

fn hosts() -> &'static [Host; 3] {
    static HOSTS: OnceLock<[Host; 3]> = OnceLock::new();
    HOSTS.get_or_init(|| {
        [
            Host::from_mountinfo(MOUNTINFO, false, false).expect("hybrid fixture"),
            Host::from_mountinfo(MOUNTINFO, false, true).expect("hybrid fixture"),
            Host::from_mountinfo(
                "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
                true,
                true,
            )
            .expect("unified host"),
        ]
    })
}

fn check_relative(rel: &Path, input: &str) {
    assert!(rel.is_absolute(), "{input:?} -> {rel:?} is not rooted");
    for c in rel.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => assert!(
                n.len() <= MAX_COMPONENT_LEN && n != "." && n != "..",
                "{input:?} -> component {n:?}"
            ),
            other => panic!("{input:?} -> {rel:?} has {other:?}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let (flags, rest) = (data[0], &data[1..]);
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    let (path, id) = value.split_once('\n').unwrap_or((value, "c1"));
    if let Ok(parsed) = parse_cgroups_path(path) {
        check_relative(&parsed.relative_path(), path);
    }
    let host = &hosts()[flags as usize % 3];
    let option = [None, Some(true), Some(false)][(flags as usize / 3) % 3];
    let arg = (flags & 0x80 == 0).then_some(path);
    if let Ok(p) = decide(arg, id, option, host) {
        check_relative(p.relative_path(), path);
        let roots: Vec<_> = host
            .v1_hierarchies()
            .into_iter()
            .map(|(_, m)| m)
            .chain(host.unified_root().map(Path::to_path_buf))
            .collect();
        for dir in p.cgroup_dirs() {
            assert!(
                roots.iter().any(|r| dir.starts_with(r) && dir != *r),
                "{path:?} -> {dir:?} is not below a hierarchy root"
            );
        }
    }
});
