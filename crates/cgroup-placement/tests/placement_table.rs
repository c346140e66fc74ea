//! Table tests of cgroupsPath parsing, slice expansion, host detection from mountinfo and
//! the placement decision. Pure: no cgroup is touched.

use std::path::{Path, PathBuf};

use cgroup_placement::{
    decide, expand_slice, filter_resources, parse_cgroups_path, systemd_cgroup_option,
    CgroupLayout, CgroupsPath, Driver, Host, Placement,
};

const SEED_UID: &str = "99afd520_5b3e_4c8d_8471_4b6c8ee26b4c";
const SEED_ID: &str = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00";

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mountinfo")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// This machine: v1 controllers each mounted alone, name=systemd, cgroup2 at unified/.
fn hybrid_host() -> Host {
    Host::from_mountinfo(&fixture("hybrid-this-host.txt"), false, false).unwrap()
}

/// This machine after `mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup`.
fn unified_host(systemd: bool) -> Host {
    Host::from_mountinfo(&fixture("unified-bind-over-hybrid.txt"), true, systemd)
        .unwrap()
        .with_v2_controllers(vec!["hugetlb".into()])
}

/// A systemd-booted legacy host (handwritten, in the layout systemd mounts).
const LEGACY_SYSTEMD_MOUNTINFO: &str = "\
25 30 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
29 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
30 25 0:28 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,net_cls,net_prio
31 25 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
32 25 0:30 / /sys/fs/cgroup/rdma rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,rdma
33 25 0:31 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,pids
";

fn legacy_host() -> Host {
    Host::from_mountinfo(LEGACY_SYSTEMD_MOUNTINFO, false, true).unwrap()
}

fn seed_path() -> String {
    format!("kubepods-pod{SEED_UID}.slice:cri-containerd:{SEED_ID}")
}

#[test]
fn parses_every_form() {
    let cases: Vec<(String, CgroupsPath)> = vec![
        (
            seed_path(),
            CgroupsPath::Systemd {
                slice: format!("kubepods-pod{SEED_UID}.slice"),
                prefix: "cri-containerd".into(),
                name: SEED_ID.into(),
            },
        ),
        (
            ":cri-containerd:abc".into(),
            CgroupsPath::Systemd {
                slice: "system.slice".into(),
                prefix: "cri-containerd".into(),
                name: "abc".into(),
            },
        ),
        (
            format!(
                "/kubepods/burstable/pod{}/{SEED_ID}",
                SEED_UID.replace('_', "-")
            ),
            CgroupsPath::Absolute(PathBuf::from(format!(
                "/kubepods/burstable/pod{}/{SEED_ID}",
                SEED_UID.replace('_', "-")
            ))),
        ),
        (
            "//kubepods/./besteffort//x/".into(),
            CgroupsPath::Absolute(PathBuf::from("/kubepods/besteffort/x")),
        ),
        (
            "mygroup/ctr".into(),
            CgroupsPath::Relative(PathBuf::from("mygroup/ctr")),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(parse_cgroups_path(&input).unwrap(), want, "input {input:?}");
    }
}

#[test]
fn rejects_invalid_inputs_with_their_error_text() {
    let long = "a".repeat(256);
    let cases: Vec<(String, &str)> = vec![
        (
            "kubepods.slice:cri-containerd".into(),
            "invalid systemd cgroupsPath \"kubepods.slice:cri-containerd\": it has 2 ':'-separated parts, exactly 3 are required; expected \"slice:prefix:name\"",
        ),
        (
            "a.slice:b:c:d".into(),
            "it has 4 ':'-separated parts, exactly 3 are required",
        ),
        (
            "kubepods:cri-containerd:x".into(),
            "invalid systemd slice \"kubepods\": it does not end in \".slice\"",
        ),
        (
            "kubepods--burstable.slice:cri-containerd:x".into(),
            "invalid systemd slice \"kubepods--burstable.slice\": it has an empty dash-separated part",
        ),
        (
            "-kubepods.slice:cri-containerd:x".into(),
            "it has an empty dash-separated part",
        ),
        (
            "a/b.slice:cri-containerd:x".into(),
            "invalid systemd slice \"a/b.slice\": it contains '/'",
        ),
        (".slice:p:x".into(), "the name before \".slice\" is empty"),
        ("a.slice::x".into(), "the prefix is empty"),
        ("a.slice:p:".into(), "the name is empty"),
        ("a.slice:p:../x".into(), "the name \"../x\" contains '/'"),
        (
            format!("a.slice:p:{long}"),
            "is 264 bytes long (limit 255)",
        ),
        (
            "/kubepods/../../etc".into(),
            "invalid cgroupfs cgroupsPath \"/kubepods/../../etc\": \"..\" would leave the cgroup hierarchy",
        ),
        ("../x".into(), "\"..\" would leave the cgroup hierarchy"),
        ("/a\0b".into(), "it contains a NUL byte"),
        (format!("/kubepods/{long}"), "is 256 bytes long (limit 255)"),
        ("/".into(), "it names the hierarchy root"),
        ("/./".into(), "it names the hierarchy root"),
    ];
    for (input, want) in cases {
        let err = parse_cgroups_path(&input).expect_err(&input).to_string();
        assert!(
            err.contains(want),
            "input {input:?}: error {err:?} lacks {want:?}"
        );
    }
}

#[test]
fn expands_slices_like_systemd() {
    let cases = [
        ("-.slice", "/"),
        ("system.slice", "/system.slice"),
        ("kubepods.slice", "/kubepods.slice"),
        (
            "kubepods-burstable.slice",
            "/kubepods.slice/kubepods-burstable.slice",
        ),
        ("a-b-c.slice", "/a.slice/a-b.slice/a-b-c.slice"),
    ];
    for (slice, want) in cases {
        assert_eq!(expand_slice(slice).unwrap(), PathBuf::from(want), "{slice}");
    }
    for bad in ["a-.slice", "a", ".slice", "a-b", "a--b.slice", "x/y.slice"] {
        assert!(expand_slice(bad).is_err(), "{bad} should be rejected");
    }
}

#[test]
fn reads_systemd_cgroup_option() {
    assert_eq!(systemd_cgroup_option("").unwrap(), None);
    assert_eq!(systemd_cgroup_option("  \n").unwrap(), None);
    assert_eq!(systemd_cgroup_option("BinaryName = \"x\"").unwrap(), None);
    assert_eq!(
        systemd_cgroup_option("SystemdCgroup = true").unwrap(),
        Some(true)
    );
    assert_eq!(
        systemd_cgroup_option("BinaryName = \"runc\"\nSystemdCgroup = false\n").unwrap(),
        Some(false)
    );
    let err = systemd_cgroup_option("SystemdCgroup = \"yes\"")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("SystemdCgroup = \"yes\" is not a boolean"),
        "{err}"
    );
    let err = systemd_cgroup_option("SystemdCgroup = ")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not TOML"), "{err}");
}

#[test]
fn detects_layouts_from_mountinfo() {
    let h = hybrid_host();
    assert_eq!(h.layout(), CgroupLayout::Hybrid);
    assert_eq!(h.unified_root(), Some(Path::new("/sys/fs/cgroup/unified")));
    let v1 = h.v1_hierarchies();
    let names: Vec<&str> = v1.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        names,
        [
            "cpu",
            "cpuacct",
            "cpuset",
            "memory",
            "devices",
            "freezer",
            "blkio",
            "pids",
            "name=systemd"
        ]
    );
    assert!(v1.contains(&(
        "name=systemd".into(),
        PathBuf::from("/sys/fs/cgroup/systemd")
    )));

    // The bind mount hides every v1 mount and the old unified mount point.
    let u = unified_host(false);
    assert_eq!(u.layout(), CgroupLayout::Unified);
    assert_eq!(u.unified_root(), Some(Path::new("/sys/fs/cgroup")));
    assert!(u.v1_hierarchies().is_empty());
    assert_eq!(u.available_v2_controllers(), ["hugetlb"]);

    let l = legacy_host();
    assert_eq!(l.layout(), CgroupLayout::Legacy);
    assert!(l.systemd_running());
    let v1 = l.v1_hierarchies();
    assert!(v1.contains(&(
        "cpu,cpuacct".into(),
        PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")
    )));
    assert!(v1.contains(&(
        "name=systemd".into(),
        PathBuf::from("/sys/fs/cgroup/systemd")
    )));
    assert!(v1.contains(&("rdma".into(), PathBuf::from("/sys/fs/cgroup/rdma"))));

    // Octal escapes in mount points are undone.
    let escaped = "40 31 0:37 / /sys/fs/cgroup/my\\040dir rw - cgroup cgroup rw,pids\n";
    let e = Host::from_mountinfo(escaped, false, false).unwrap();
    assert_eq!(
        e.v1_hierarchies()[0].1,
        PathBuf::from("/sys/fs/cgroup/my dir")
    );

    assert!(Host::from_mountinfo("garbage line\n", false, false).is_err());
    // Found by `make fuzz` (mountinfo target): a line that ends after the source, with no
    // super options, is an error, not an index out of bounds.
    let short = "46 45 254:0 / / rw,relatime - ext4 /dev/vda\n";
    let err = Host::from_mountinfo(short, false, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mountinfo line 1"), "{err}");
    let err = Host::from_mountinfo("", false, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no cgroup v1 hierarchy is mounted"), "{err}");
}

fn kube_parent(qos: &str) -> (String, String) {
    // (systemd slice, expanded path) for a pod of the given QoS class.
    match qos {
        "guaranteed" => (
            format!("kubepods-pod{SEED_UID}.slice"),
            format!("/kubepods.slice/kubepods-pod{SEED_UID}.slice"),
        ),
        q => (
            format!("kubepods-{q}-pod{SEED_UID}.slice"),
            format!("/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{SEED_UID}.slice"),
        ),
    }
}

#[test]
fn systemd_form_lands_under_the_pod_slice_on_every_layout() {
    for qos in ["guaranteed", "burstable", "besteffort"] {
        let (slice, parent) = kube_parent(qos);
        let value = format!("{slice}:cri-containerd:{SEED_ID}");
        let want_rel = PathBuf::from(format!("{parent}/cri-containerd-{SEED_ID}.scope"));
        let unit = format!("cri-containerd-{SEED_ID}.scope");

        // Hybrid (this machine): cgroupfs in every v1 hierarchy and the unified one.
        let p = decide(Some(&value), SEED_ID, None, &hybrid_host()).unwrap();
        assert_eq!(p.driver(), Driver::Cgroupfs, "{qos}");
        assert_eq!(p.relative_path(), want_rel, "{qos}");
        assert_eq!(p.unit_name(), Some(unit.as_str()));
        assert_eq!(p.youki_cgroups_path(), want_rel.to_str().unwrap());
        assert!(!p.youki_systemd());
        let dirs = p.cgroup_dirs();
        assert_eq!(dirs.len(), 10, "9 v1 hierarchies + unified: {dirs:?}");
        for root in ["cpu", "cpuacct", "memory", "pids", "systemd", "unified"] {
            let d = Path::new("/sys/fs/cgroup")
                .join(root)
                .join(want_rel.strip_prefix("/").unwrap());
            assert!(
                dirs.contains(&d),
                "{qos}: {} missing from {dirs:?}",
                d.display()
            );
        }

        // Unified without systemd: cgroupfs at the path systemd would have used.
        let p = decide(Some(&value), SEED_ID, None, &unified_host(false)).unwrap();
        assert_eq!(p.driver(), Driver::Cgroupfs);
        assert_eq!(
            p.cgroup_dirs(),
            [Path::new("/sys/fs/cgroup").join(want_rel.strip_prefix("/").unwrap())]
        );
        assert_eq!(p.youki_cgroups_path(), want_rel.to_str().unwrap());

        // Unified with systemd: the systemd driver, youki gets slice:prefix:name.
        let p = decide(Some(&value), SEED_ID, None, &unified_host(true)).unwrap();
        assert_eq!(p.driver(), Driver::Systemd);
        assert!(p.youki_systemd());
        assert_eq!(p.youki_cgroups_path(), value);
        assert_eq!(p.relative_path(), want_rel);
        assert_eq!(p.unit_name(), Some(unit.as_str()));

        // Legacy with systemd running: still cgroupfs (youki's v1 manager), systemd's path.
        let p = decide(Some(&value), SEED_ID, Some(true), &legacy_host()).unwrap();
        assert_eq!(p.driver(), Driver::Cgroupfs);
        assert_eq!(p.relative_path(), want_rel);
        assert!(p.cgroup_dirs().contains(
            &Path::new("/sys/fs/cgroup/cpu,cpuacct").join(want_rel.strip_prefix("/").unwrap())
        ));
    }
}

#[test]
fn seed_path_is_not_a_directory_name() {
    // The seed bug: runc's cgroupfs driver created a directory literally named after the
    // whole string at the hierarchy root. The decision must never do that.
    let p = decide(Some(&seed_path()), SEED_ID, None, &hybrid_host()).unwrap();
    for dir in p.cgroup_dirs() {
        let s = dir.to_string_lossy();
        assert!(!s.contains(':'), "{s}");
        assert!(
            s.contains(&format!("/kubepods.slice/kubepods-pod{SEED_UID}.slice/")),
            "{s}"
        );
    }
}

#[test]
fn cgroupfs_forms_and_default() {
    let uid = SEED_UID.replace('_', "-");
    let value = format!("/kubepods/burstable/pod{uid}/{SEED_ID}");
    for host in [hybrid_host(), unified_host(true), legacy_host()] {
        let p = decide(Some(&value), SEED_ID, Some(true), &host).unwrap();
        assert_eq!(
            p.driver(),
            Driver::Cgroupfs,
            "the path wins over SystemdCgroup = true"
        );
        assert_eq!(p.relative_path(), Path::new(&value));
        assert_eq!(p.youki_cgroups_path(), value);
        assert_eq!(p.unit_name(), None);
    }
    let p = decide(Some("mygroup/ctr"), "ctr", None, &hybrid_host()).unwrap();
    assert_eq!(p.relative_path(), Path::new("/mygroup/ctr"));

    // Absent or empty path: /<id>, or system.slice:spin:<id> with SystemdCgroup and systemd.
    for absent in [None, Some("")] {
        let p = decide(absent, "abc", None, &hybrid_host()).unwrap();
        assert_eq!(p.relative_path(), Path::new("/abc"));
        let p = decide(absent, "abc", Some(true), &unified_host(true)).unwrap();
        assert_eq!(p.driver(), Driver::Systemd);
        assert_eq!(p.youki_cgroups_path(), "system.slice:spin:abc");
        assert_eq!(p.relative_path(), Path::new("/system.slice/spin-abc.scope"));
        let p = decide(absent, "abc", Some(true), &unified_host(false)).unwrap();
        assert_eq!(p.driver(), Driver::Cgroupfs);
        assert_eq!(p.relative_path(), Path::new("/abc"));
        let p = decide(absent, "abc", Some(true), &legacy_host()).unwrap();
        assert_eq!(p.driver(), Driver::Cgroupfs);
        assert_eq!(p.relative_path(), Path::new("/system.slice/spin-abc.scope"));
    }
    for bad in ["", "..", "a/b", "a:b"] {
        let err = decide(None, bad, None, &hybrid_host())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("invalid container id {bad:?}")),
            "{err}"
        );
    }
    // The systemd form with SystemdCgroup = false: the path still wins.
    let p = decide(
        Some(&seed_path()),
        SEED_ID,
        Some(false),
        &unified_host(true),
    )
    .unwrap();
    assert_eq!(p.driver(), Driver::Systemd);
}

#[test]
fn placement_round_trips_through_json() {
    let p = decide(Some(&seed_path()), SEED_ID, None, &hybrid_host()).unwrap();
    let json = serde_json::to_string(&p).unwrap();
    let back: Placement = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    assert_eq!(back.cgroup_dirs(), p.cgroup_dirs());
}

#[test]
fn filters_settings_of_absent_controllers() {
    use oci_spec::runtime::{
        LinuxCpuBuilder, LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResourcesBuilder,
    };
    let resources = || {
        LinuxResourcesBuilder::default()
            .cpu(
                LinuxCpuBuilder::default()
                    .shares(2u64)
                    .cpus("0")
                    .build()
                    .unwrap(),
            )
            .memory(
                LinuxMemoryBuilder::default()
                    .limit(1 << 30)
                    .build()
                    .unwrap(),
            )
            .pids(LinuxPidsBuilder::default().limit(100).build().unwrap())
            .unified(
                [
                    ("memory.high".to_string(), "1G".to_string()),
                    ("hugetlb.2MB.max".into(), "0".into()),
                ]
                .into_iter()
                .collect::<std::collections::HashMap<_, _>>(),
            )
            .build()
            .unwrap()
    };
    // Simulated v2 host: only hugetlb is offered.
    let mut r = resources();
    let warnings = filter_resources(&unified_host(false), &mut r);
    assert_eq!(warnings.len(), 5, "{warnings:#?}");
    assert!(warnings[0].contains("memory settings") && warnings[0].contains("\"memory\""));
    assert!(r.memory().is_none() && r.cpu().is_none() && r.pids().is_none());
    assert_eq!(
        r.unified().as_ref().unwrap().keys().collect::<Vec<_>>(),
        ["hugetlb.2MB.max"]
    );

    // A v2 host with cpu but no cpuset keeps shares and drops cpus.
    let host = unified_host(false).with_v2_controllers(
        ["cpu", "memory", "pids", "hugetlb"]
            .map(String::from)
            .to_vec(),
    );
    let mut r = resources();
    let warnings = filter_resources(&host, &mut r);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(r.cpu().as_ref().unwrap().shares(), Some(2));
    assert!(r.cpu().as_ref().unwrap().cpus().is_none());
    assert!(r.memory().is_some() && r.pids().is_some());

    // This machine's v1 hierarchies offer everything used here.
    let mut r = resources();
    assert!(filter_resources(&hybrid_host(), &mut r).is_empty());
    assert_eq!(r, resources());
}

#[test]
fn knows_which_hierarchies_youki_joins() {
    // youki's v1 manager (libcgroups 0.7) finds a controller by its mount point's last
    // component and never joins named hierarchies or controllers it does not know.
    let managed = |h: &Host| -> Vec<(String, bool)> {
        h.v1_hierarchy_details()
            .iter()
            .map(|v| (v.controllers_string(), v.managed_by_youki()))
            .collect()
    };
    let hybrid = managed(&hybrid_host());
    for (c, m) in &hybrid {
        assert_eq!(*m, c != "name=systemd", "{c}: {hybrid:?}");
    }
    assert_eq!(
        managed(&legacy_host()),
        [
            ("name=systemd".to_string(), false),
            ("cpu,cpuacct".to_string(), true),
            ("net_cls,net_prio".to_string(), true),
            ("memory".to_string(), true),
            ("rdma".to_string(), false),
            ("pids".to_string(), true),
        ]
    );
    // A controller mounted under a name youki does not look for is ours to join.
    let odd = "40 31 0:37 / /sys/fs/cgroup/mem rw - cgroup cgroup rw,memory\n";
    let h = Host::from_mountinfo(odd, false, false).unwrap();
    assert!(!h.v1_hierarchy_details()[0].managed_by_youki());
}

/// Runs `f` with a subscriber that records formatted log lines, and returns them.
fn logged(f: impl FnOnce()) -> String {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buf.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn warns_when_the_option_contradicts_the_path() {
    let log = logged(|| {
        decide(Some(&seed_path()), SEED_ID, Some(false), &hybrid_host()).unwrap();
    });
    assert!(log.contains("WARN"), "{log}");
    assert!(
        log.contains("SystemdCgroup = false") && log.contains("the path wins"),
        "{log}"
    );

    let log = logged(|| {
        decide(Some("/kubepods/x"), "x", Some(true), &hybrid_host()).unwrap();
    });
    assert!(
        log.contains("SystemdCgroup = true") && log.contains("cgroupfs path"),
        "{log}"
    );

    // Agreeing option and path: nothing to say.
    let log = logged(|| {
        decide(Some(&seed_path()), SEED_ID, Some(true), &hybrid_host()).unwrap();
        decide(Some("/kubepods/x"), "x", Some(false), &hybrid_host()).unwrap();
        decide(Some("/kubepods/x"), "x", None, &hybrid_host()).unwrap();
    });
    assert!(log.is_empty(), "{log}");
}

/// containerd's `cgroup` mount of a CRI container, as in its default spec.
fn cri_cgroup_mount(ro: bool) -> oci_spec::runtime::Mount {
    let mut opts = vec!["nosuid", "noexec", "nodev", "relatime"];
    if ro {
        opts.push("ro");
    }
    oci_spec::runtime::MountBuilder::default()
        .destination("/sys/fs/cgroup")
        .typ("cgroup")
        .source("cgroup")
        .options(opts.into_iter().map(String::from).collect::<Vec<_>>())
        .build()
        .unwrap()
}

#[test]
fn v1_cgroup_mount_becomes_binds_of_the_container_cgroup() {
    let host = legacy_host();
    let path = format!("/kubepods/burstable/pod{SEED_UID}/{SEED_ID}");
    let p = decide(Some(&path), SEED_ID, None, &host).unwrap();
    let mounts = p.v1_cgroup_mounts(&cri_cgroup_mount(true)).unwrap();
    let got: Vec<(String, String, String, bool)> = mounts
        .iter()
        .map(|m| {
            (
                m.destination().display().to_string(),
                m.typ().clone().unwrap_or_default(),
                m.source()
                    .as_ref()
                    .map(|s| s.display().to_string())
                    .unwrap_or_default(),
                m.options().iter().flatten().any(|o| o == "ro"),
            )
        })
        .collect();
    let bind = |name: &str| {
        (
            format!("/sys/fs/cgroup/{name}"),
            "bind".to_string(),
            format!("/sys/fs/cgroup/{name}{path}"),
            true,
        )
    };
    assert_eq!(
        got,
        vec![
            (
                "/sys/fs/cgroup".into(),
                "tmpfs".into(),
                "tmpfs".into(),
                false
            ),
            bind("systemd"),
            bind("cpu,cpuacct"),
            bind("net_cls,net_prio"),
            bind("memory"),
            bind("rdma"),
            bind("pids"),
        ]
    );
    // A privileged container's rw mount gives rw binds.
    let rw = p.v1_cgroup_mounts(&cri_cgroup_mount(false)).unwrap();
    assert!(rw[1..]
        .iter()
        .all(|m| !m.options().iter().flatten().any(|o| o == "ro")));

    // In a spec: the cgroup mount is replaced in place; others stay.
    let mut spec = oci_spec::runtime::Spec::default();
    let before: Vec<_> = spec
        .mounts()
        .clone()
        .unwrap()
        .into_iter()
        .filter(|m| m.typ().as_deref() != Some("cgroup"))
        .collect();
    let mut with = before.clone();
    with.push(cri_cgroup_mount(true));
    spec.set_mounts(Some(with));
    p.rewrite_spec(&mut spec, &host);
    let after = spec.mounts().clone().unwrap();
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(after.len(), before.len() + 7);
    assert!(after.iter().all(|m| m.typ().as_deref() != Some("cgroup")));

    // Unified hosts keep the cgroup2 mount as it is.
    let p = decide(Some(&path), SEED_ID, None, &unified_host(false)).unwrap();
    assert!(p.v1_cgroup_mounts(&cri_cgroup_mount(true)).is_none());
}
