//! `containerd-shim-spin-v2 doctor` against real, private containerds: registered the way
//! SpinKube documents it (options table with SystemdCgroup) on 1.7 and on the host's
//! hybrid layout, on 2.x in a private pure cgroup v2 namespace, and with a wrong node
//! config (runtime not registered, shim not on containerd's PATH). Root only.

use anyhow::{ensure, Result};
use integration::{CgroupMode, Containerd, ContainerdConfig, ContainerdVersion};
use serde_json::Value;

/// Runs the doctor for containerd `c` and returns (exit code, report).
fn doctor(c: &Containerd) -> Result<(i32, Value)> {
    let config = c.dir().join("config.toml");
    integration::doctor_json(&["--config".as_ref(), config.as_os_str()])
}

use integration::doctor_check as check;

fn expect(report: &Value, name: &str, verdict: &str, needles: &[&str]) -> Result<()> {
    let (v, d) = check(report, name)?;
    ensure!(v == verdict, "`{name}`: verdict {v}, want {verdict}: {d}");
    for n in needles {
        ensure!(d.contains(n), "`{name}`: {d:?} lacks {n:?}");
    }
    Ok(())
}

/// The spin runtime table as SpinKube's docs write it.
fn spinkube_runtime(version: ContainerdVersion) -> String {
    let plugin = version.cri_runtime_plugin();
    format!(
        "[plugins.\"{plugin}\".containerd.runtimes.spin]\n  runtime_type = \"io.containerd.spin.v2\"\n\
         [plugins.\"{plugin}\".containerd.runtimes.spin.options]\n  SystemdCgroup = true\n"
    )
}

#[test]
fn doctor_passes_a_spinkube_node_on_containerd_1_7() {
    let Some(_s) = integration::root_test("doctor_passes_a_spinkube_node_on_containerd_1_7") else {
        return;
    };
    let r = (|| {
        integration::require_shim()?;
        let cfg = ContainerdConfig {
            extra: spinkube_runtime(ContainerdVersion::V1_7),
            ..Default::default()
        };
        let c = Containerd::start_with(ContainerdVersion::V1_7, CgroupMode::Host, &cfg)?;
        let (code, report) = doctor(&c)?;
        println!("{report:#}");
        expect(
            &report,
            "containerd",
            "ok",
            &["1.7.", &format!("pid {}", c.pid())],
        )?;
        expect(
            &report,
            "runtime",
            "ok",
            &["handler `spin`", "SystemdCgroup = true"],
        )?;
        expect(
            &report,
            "shim",
            "ok",
            &[&integration::shim_bin_dir().display().to_string()],
        )?;
        expect(&report, "cgroups", "ok", &["hybrid", "cpu", "memory"])?;
        expect(&report, "devices", "ok", &["v1 devices controller"])?;
        ensure!(
            code == 0 && report["ok"] == true,
            "exit {code} on a correctly configured node: {report}"
        );
        Ok(())
    })();
    r.unwrap_or_else(|e: anyhow::Error| panic!("{e:#}"));
}

#[test]
fn doctor_sees_the_v2_layout_containerd_sees() {
    let Some(_s) = integration::root_test("doctor_sees_the_v2_layout_containerd_sees") else {
        return;
    };
    let r = (|| {
        integration::require_shim()?;
        let cfg = ContainerdConfig {
            extra: spinkube_runtime(ContainerdVersion::V2),
            ..Default::default()
        };
        let c = Containerd::start_with(ContainerdVersion::V2, CgroupMode::UnifiedNamespace, &cfg)?;
        let (code, report) = doctor(&c)?;
        println!("{report:#}");
        expect(&report, "containerd", "ok", &["2."])?;
        expect(&report, "runtime", "ok", &["handler `spin`"])?;
        // The namespace shows the host's unified hierarchy as /sys/fs/cgroup: on a hybrid
        // host it has only the controllers v1 does not hold, on a v2 host all of them.
        let ctl = std::fs::read_to_string(
            if std::path::Path::new("/sys/fs/cgroup/unified/cgroup.controllers").exists() {
                "/sys/fs/cgroup/unified/cgroup.controllers"
            } else {
                "/sys/fs/cgroup/cgroup.controllers"
            },
        )?;
        let has = |c: &str| ctl.split_whitespace().any(|x| x == c);
        let (verdict, want_code) = match (has("memory"), has("cpu")) {
            (false, _) => ("fail", 1),
            (true, false) => ("warn", 0),
            (true, true) => ("ok", 0),
        };
        expect(&report, "cgroups", verdict, &["cgroup v2", ctl.trim()])?;
        if verdict == "fail" {
            expect(&report, "cgroups", "fail", &["missing memory"])?;
        }
        expect(
            &report,
            "devices",
            "ok",
            &["device filters load", "every container's cgroup"],
        )?;
        ensure!(code == want_code, "exit {code}, want {want_code}: {report}");
        Ok(())
    })();
    r.unwrap_or_else(|e: anyhow::Error| panic!("{e:#}"));
}

#[test]
fn doctor_fails_a_node_without_the_runtime_or_the_shim() {
    let Some(_s) = integration::root_test("doctor_fails_a_node_without_the_runtime_or_the_shim")
    else {
        return;
    };
    let r = (|| {
        integration::require_shim()?;
        // No runtime table, and a PATH without the shim (the harness's comes first).
        let cfg = ContainerdConfig {
            env: vec![("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into())],
            ..Default::default()
        };
        let c = Containerd::start_with(ContainerdVersion::V1_6, CgroupMode::Host, &cfg)?;
        let (code, report) = doctor(&c)?;
        println!("{report:#}");
        expect(&report, "containerd", "ok", &["1.6."])?;
        expect(
            &report,
            "runtime",
            "fail",
            &["does not register", "io.containerd.spin.v2"],
        )?;
        expect(
            &report,
            "shim",
            "fail",
            &["not on containerd's PATH", "/usr/sbin:/usr/bin"],
        )?;
        ensure!(
            code == 1 && report["ok"] == false,
            "exit {code} on a node that cannot run Spin pods: {report}"
        );
        Ok(())
    })();
    r.unwrap_or_else(|e: anyhow::Error| panic!("{e:#}"));
}
