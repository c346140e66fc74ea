//! The systemd side of a node: kubelet's pod slices as transient slice units, and what
//! `systemctl` reports about units (scopes the runtime created, slices kubelet created).

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Properties of a unit as `systemctl show -p A -p B ...` prints them (`A=value` lines).
pub fn parse_show(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs `systemctl show UNIT -p ...` and returns the requested properties.
pub fn show(unit: &str, props: &[&str]) -> Result<HashMap<String, String>> {
    let mut cmd = Command::new("systemctl");
    cmd.arg("show").arg(unit);
    for p in props {
        cmd.arg("-p").arg(p);
    }
    let out = cmd
        .output()
        .context("running systemctl show (is systemd installed?)")?;
    if !out.status.success() {
        bail!(
            "systemctl show {unit} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_show(&String::from_utf8_lossy(&out.stdout)))
}

/// `systemctl status UNIT` output, for logs (its exit code says nothing we assert on).
pub fn status_text(unit: &str) -> String {
    match Command::new("systemctl")
        .args(["status", "--no-pager", "--lines=0", unit])
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("(systemctl status {unit} failed: {e})"),
    }
}

/// `true` when systemd currently knows the unit (loaded, or still being cleaned up).
pub fn is_loaded(unit: &str) -> Result<bool> {
    let props = show(unit, &["LoadState", "ActiveState"])?;
    let load = props.get("LoadState").map(String::as_str).unwrap_or("");
    let active = props.get("ActiveState").map(String::as_str).unwrap_or("");
    Ok(!(load == "not-found" && active == "inactive"))
}

/// Polls until `unit` is unknown to systemd, at most `timeout`.
pub fn wait_unloaded(unit: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while is_loaded(unit)? {
        if Instant::now() >= deadline {
            bail!(
                "unit {unit} is still loaded {timeout:?} after its container was removed:\n{}",
                status_text(unit)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Polls until `unit` is inactive (stopped; systemd may keep an inactive slice loaded while
/// its parents reference it), at most `timeout`.
pub fn wait_inactive(unit: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let props = show(unit, &["ActiveState"])?;
        if props.get("ActiveState").map(String::as_str) == Some("inactive") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "unit {unit} is not inactive {timeout:?} after it was stopped:\n{}",
                status_text(unit)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The parent slice of a slice unit by systemd's naming rule (`a-b-c.slice` -> `a-b.slice`,
/// `a.slice` -> `-.slice`).
pub fn parent_slice(slice: &str) -> Option<String> {
    let stem = slice.strip_suffix(".slice")?;
    Some(match stem.rsplit_once('-') {
        Some((parent, _)) => format!("{parent}.slice"),
        None => "-.slice".to_string(),
    })
}

/// The arguments of a `busctl call` that starts a transient slice unit as kubelet's systemd
/// cgroup driver does: no default dependencies, wanted by its parent slice, accounting on.
pub fn start_slice_args(slice: &str) -> Vec<String> {
    let parent = parent_slice(slice).unwrap_or_else(|| "-.slice".into());
    let mut args: Vec<String> = [
        "--quiet",
        "call",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend([slice.to_string(), "replace".into(), "6".into()]);
    args.extend([
        "Description".into(),
        "s".into(),
        format!("libcontainer container {slice}"),
    ]);
    args.extend(["Wants".into(), "as".into(), "1".into(), parent]);
    args.extend(["DefaultDependencies".into(), "b".into(), "false".into()]);
    for acc in ["CPUAccounting", "MemoryAccounting", "TasksAccounting"] {
        args.extend([acc.into(), "b".into(), "true".into()]);
    }
    args.push("0".into());
    args
}

/// A kubelet-style pod slice, started as a transient unit over D-Bus. Dropping it stops the
/// slice (systemd then removes its cgroup) and the parent slices this guard caused.
#[derive(Debug)]
pub struct PodSlice {
    /// The pod slice unit, e.g. `kubepods-burstable-pod<uid_>.slice`.
    pub unit: String,
    /// Ancestor slices that were not loaded before (stopped again on drop).
    started_parents: Vec<String>,
}

impl PodSlice {
    /// Starts `unit` and waits until it is active with the cgroup `expected_cgroup`.
    pub fn start(unit: &str, expected_cgroup: &str) -> Result<Self> {
        let mut started_parents = Vec::new();
        let mut p = parent_slice(unit);
        while let Some(parent) = p.filter(|s| s != "-.slice") {
            if !is_loaded(&parent)? {
                started_parents.push(parent.clone());
            }
            p = parent_slice(&parent);
        }
        let out = Command::new("busctl")
            .args(start_slice_args(unit))
            .output()
            .context("running busctl (systemd's D-Bus tool)")?;
        let guard = PodSlice {
            unit: unit.to_string(),
            started_parents,
        };
        if !out.status.success() {
            bail!(
                "StartTransientUnit {unit} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let props = show(unit, &["ActiveState", "ControlGroup"])?;
            if props.get("ActiveState").map(String::as_str) == Some("active") {
                let cg = props.get("ControlGroup").cloned().unwrap_or_default();
                if cg != expected_cgroup {
                    bail!(
                        "pod slice {unit} has cgroup {cg:?}, kubelet expects {expected_cgroup:?}"
                    );
                }
                return Ok(guard);
            }
            if Instant::now() >= deadline {
                bail!("pod slice {unit} not active after 10s: {props:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PodSlice {
    fn drop(&mut self) {
        let units = std::iter::once(&self.unit).chain(self.started_parents.iter());
        for unit in units {
            match Command::new("systemctl").args(["stop", unit]).status() {
                Ok(s) if s.success() => {}
                other => eprintln!("systemd-node: stopping {unit}: {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_output_parses_into_properties() {
        let p = parse_show(
            "ActiveState=active\nDelegate=yes\nControlGroup=/a.slice/b.scope\nExecStart=\n",
        );
        assert_eq!(p["ActiveState"], "active");
        assert_eq!(p["Delegate"], "yes");
        assert_eq!(p["ControlGroup"], "/a.slice/b.scope");
        assert_eq!(p["ExecStart"], "");
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn parent_slices_follow_systemd_naming() {
        assert_eq!(
            parent_slice("kubepods-burstable-pod12_34.slice").as_deref(),
            Some("kubepods-burstable.slice")
        );
        assert_eq!(
            parent_slice("kubepods-burstable.slice").as_deref(),
            Some("kubepods.slice")
        );
        assert_eq!(parent_slice("kubepods.slice").as_deref(), Some("-.slice"));
        assert_eq!(parent_slice("cri-containerd-x.scope"), None);
    }

    #[test]
    fn transient_slice_call_has_matching_signature_and_counts() {
        let a = start_slice_args("kubepods-besteffort-podab_cd.slice");
        let i = a.iter().position(|s| s == "ssa(sv)a(sa(sv))").unwrap();
        assert_eq!(a[i + 1], "kubepods-besteffort-podab_cd.slice");
        assert_eq!(a[i + 2], "replace");
        // The declared property count must equal the (name, type, value) groups that follow.
        let count: usize = a[i + 3].parse().unwrap();
        let props = &a[i + 4..a.len() - 1];
        let names: Vec<&str> = props
            .iter()
            .enumerate()
            .filter(|(j, _)| {
                // every group starts with a property name; `Wants as 1 x` has 4 tokens
                matches!(
                    props[*j].as_str(),
                    "Description" | "Wants" | "DefaultDependencies"
                ) || props[*j].ends_with("Accounting")
            })
            .map(|(_, s)| s.as_str())
            .collect();
        assert_eq!(names.len(), count, "{a:?}");
        assert!(props
            .windows(4)
            .any(|w| w == ["Wants", "as", "1", "kubepods-besteffort.slice"]));
        assert_eq!(a.last().unwrap(), "0", "no auxiliary units");
    }
}
