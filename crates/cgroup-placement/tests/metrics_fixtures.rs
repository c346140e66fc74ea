//! Metrics parsing from files captured on this machine (`fixtures/v1`,
//! `fixtures/v2-hybrid-unified`) and from handwritten files for what these machines lack
//! (`fixtures/v2-handwritten`, `fixtures/v1-blkio-handwritten`; see their README.md).

use std::path::{Path, PathBuf};

use cgroup_placement::proto::{v1, v2};
use cgroup_placement::{read_v1_metrics, read_v2_metrics, Metrics};
use protobuf::Message;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn v1_dirs() -> Vec<(String, PathBuf)> {
    ["cpu", "cpuacct", "memory", "pids", "blkio"]
        .into_iter()
        .map(|c| (c.to_string(), fixtures().join("v1").join(c)))
        .collect()
}

#[test]
fn v1_captured_files() {
    let m = read_v1_metrics(&v1_dirs()).unwrap();
    let usage = m.cpu.usage.as_ref().unwrap();
    // cpuacct.usage and usage_percpu are nanoseconds already.
    assert_eq!(usage.total, 328_777_385);
    assert_eq!(usage.per_cpu, [321_110_805, 7_666_580]);
    // cpuacct.stat is in USER_HZ ticks (100/s here): 29 and 3 ticks.
    assert_eq!(usage.user, 290_000_000);
    assert_eq!(usage.kernel, 30_000_000);
    let thr = m.cpu.throttling.as_ref().unwrap();
    assert_eq!(
        (thr.periods, thr.throttled_periods, thr.throttled_time),
        (0, 0, 0)
    );

    let mem = m.memory.as_ref().unwrap();
    assert_eq!(mem.usage.usage, 430_080);
    assert_eq!(mem.usage.limit, 9_223_372_036_854_771_712);
    assert_eq!(mem.total_inactive_file, 110_592);
    assert_eq!(mem.cache, 192_512);
    assert_eq!(mem.pg_pg_in, 778);
    assert_eq!(mem.hierarchical_memory_limit, 9_223_372_036_854_771_712);
    assert!(mem.swap.is_some(), "memsw files were captured");
    assert!(mem.kernel.is_some() && mem.kernel_tcp.is_some());
    assert_eq!(m.memory_oom_control.oom_kill, 0);

    // pids.max "max" reads as 0 in the v1 message, as containerd reports it.
    assert_eq!((m.pids.current, m.pids.limit), (0, 0));
    // Only "Total 0" lines on this machine: no per-device entries.
    assert!(m.blkio.io_service_bytes_recursive.is_empty());

    let metrics = Metrics::V1(m.clone());
    assert_eq!(metrics.cpu_usage_ns(), Some(328_777_385));
    assert_eq!(metrics.working_set_bytes(), Some(430_080 - 110_592));

    let any = metrics.to_any().unwrap();
    assert_eq!(any.type_url, "io.containerd.cgroups.v1.Metrics");
    assert_eq!(v1::Metrics::parse_from_bytes(&any.value).unwrap(), m);
}

#[test]
fn v1_handwritten_blkio() {
    let dirs = vec![("blkio".to_string(), fixtures().join("v1-blkio-handwritten"))];
    let m = read_v1_metrics(&dirs).unwrap();
    let bytes = &m.blkio.io_service_bytes_recursive;
    assert_eq!(
        bytes.len(),
        6,
        "device lines incl. the per-device Total: {bytes:?}"
    );
    assert_eq!((bytes[0].major, bytes[0].minor), (254, 0));
    assert_eq!((bytes[0].op.as_str(), bytes[0].value), ("Read", 1_052_672));
    assert_eq!((bytes[1].op.as_str(), bytes[1].value), ("Write", 8_388_608));
    assert_eq!(m.blkio.io_serviced_recursive[1].value, 64);
    // Hierarchies that were not given stay empty rather than failing the read.
    assert!(m.cpu.is_none() && m.memory.is_none() && m.pids.is_none());
}

#[test]
fn v1_missing_hierarchies_and_dirs() {
    // Only cpuacct present: the rest stays empty.
    let dirs = vec![
        ("cpuacct".to_string(), fixtures().join("v1/cpuacct")),
        (
            "memory".to_string(),
            PathBuf::from("/nonexistent/cgroup/memory"),
        ),
    ];
    let m = read_v1_metrics(&dirs).unwrap();
    assert_eq!(m.cpu.usage.total, 328_777_385);
    assert!(m.cpu.throttling.is_none());
    assert!(m.memory.is_none());
    // No directory at all: the cgroup is gone, which is an error naming the paths.
    let err = read_v1_metrics(&[("cpu".into(), PathBuf::from("/nonexistent/x"))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/x"), "{err}");
}

#[test]
fn v2_captured_hybrid_unified_files() {
    // This machine's unified cgroups: cpu.stat without throttling keys, PSI, nothing else.
    let m = read_v2_metrics(&fixtures().join("v2-hybrid-unified")).unwrap();
    let cpu = m.cpu.as_ref().unwrap();
    assert_eq!(
        (cpu.usage_usec, cpu.user_usec, cpu.system_usec),
        (328_777, 298_226, 30_551)
    );
    assert_eq!(
        (cpu.nr_periods, cpu.nr_throttled, cpu.throttled_usec),
        (0, 0, 0)
    );
    let psi = cpu.psi.as_ref().unwrap();
    assert_eq!(psi.some.avg10, 1.09);
    assert_eq!(psi.some.avg60, 0.32);
    assert_eq!(psi.some.total, 238_953);
    assert_eq!(psi.full.total, 237_865);
    assert_eq!(m.io.psi.some.total, 22_351);
    assert!(m.io.usage.is_empty());
    // memory.pressure alone: the memory message carries PSI and zero usage.
    assert_eq!(m.memory.usage, 0);
    assert!(m.memory.psi.is_some());
    assert!(m.pids.is_none() && m.memory_events.is_none());

    let metrics = Metrics::V2(m.clone());
    assert_eq!(metrics.cpu_usage_ns(), Some(328_777_000));
    let any = metrics.to_any().unwrap();
    assert_eq!(any.type_url, "io.containerd.cgroups.v2.Metrics");
    assert_eq!(v2::Metrics::parse_from_bytes(&any.value).unwrap(), m);
}

#[test]
fn v2_handwritten_full_controller_files() {
    let m = read_v2_metrics(&fixtures().join("v2-handwritten")).unwrap();
    let cpu = m.cpu.as_ref().unwrap();
    assert_eq!(cpu.usage_usec, 4_031_275);
    assert_eq!(
        (cpu.nr_periods, cpu.nr_throttled, cpu.throttled_usec),
        (412, 37, 912_004)
    );
    assert_eq!((cpu.nr_bursts, cpu.burst_usec), (2, 1500));
    let mem = m.memory.as_ref().unwrap();
    assert_eq!(mem.usage, 16_777_216);
    assert_eq!(mem.usage_limit, u64::MAX, "memory.max \"max\"");
    assert_eq!(mem.max_usage, 20_971_520);
    assert_eq!((mem.swap_usage, mem.swap_limit), (0, 268_435_456));
    assert_eq!(mem.inactive_file, 3_145_728);
    assert_eq!(mem.anon, 10_485_760);
    assert_eq!((mem.pgfault, mem.pgmajfault), (5120, 7));
    assert_eq!(m.memory_events.high, 3);
    assert_eq!((m.pids.current, m.pids.limit), (4, u64::MAX));
    assert_eq!(
        m.hugetlb.len(),
        1,
        "rsvd files are not a page size: {:?}",
        m.hugetlb
    );
    let h = &m.hugetlb[0];
    assert_eq!(
        (h.pagesize.as_str(), h.current, h.max, h.failcnt),
        ("2MB", 0, u64::MAX, 2)
    );
    assert_eq!(m.io.usage.len(), 2);
    let vda = &m.io.usage[0];
    assert_eq!(
        (vda.major, vda.minor, vda.rbytes, vda.wbytes, vda.rios, vda.wios),
        (254, 0, 1_052_672, 8_388_608, 23, 64)
    );
    assert_eq!(
        Metrics::V2(m).working_set_bytes(),
        Some(16_777_216 - 3_145_728)
    );
}

#[test]
fn v2_missing_and_malformed_files() {
    let dir = tempfile::tempdir().unwrap();
    // cpu.stat only, no PSI: the PSI field stays empty, nothing fails.
    std::fs::write(
        dir.path().join("cpu.stat"),
        "usage_usec 5\nuser_usec 3\nsystem_usec 2\n",
    )
    .unwrap();
    let m = read_v2_metrics(dir.path()).unwrap();
    assert_eq!(m.cpu.usage_usec, 5);
    assert!(m.cpu.psi.is_none());
    assert!(m.memory.is_none() && m.io.is_none() && m.pids.is_none());

    std::fs::write(dir.path().join("cpu.stat"), "usage_usec five\n").unwrap();
    let err = format!("{:#}", read_v2_metrics(dir.path()).unwrap_err());
    assert!(
        err.contains("cpu.stat") && err.contains("bad number"),
        "{err}"
    );

    let err = read_v2_metrics(&dir.path().join("gone"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");
}
