//! The shim's precompile and the runtime's load compile the same units (one compile plan):
//! for every app form the guest apps exercise, a container started by the shim with an
//! empty node cache loads every unit from the entries the shim compiled before it started,
//! and compiles nothing itself. A drift between what the shim compiles and what the
//! runtime looks up would be a silent cache miss (the container compiling inside its own
//! memory limit); here it fails the test, naming the app and the runtime's own account
//! (its `app loaded` line: `compiled=`, `cache_hits=`).
//!
//! Forms: Spin 3 HTTP (several components, one source), Spin 2.0 (a wasip1 module of
//! spin-sdk 2, componentized), Spin 4 (a WASIp3 snapshot component, retargeted), a Spin 1.x
//! module (adapted), WAGI (wasip1 commands), Spin 4 middleware chains (composed, a
//! component cloned per trigger), a cron trigger (event trigger: no baseline tier), each as
//! a spin-in-container image, and the Spin 4 and middleware apps as Spin OCI artifacts.
//! Root only: `cargo test --release --workspace --test compile_plan -- --nocapture`.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{
    require_shim, root_test, unique, wait_for, workspace_root, CgroupMode, Containerd,
    ContainerdConfig, ContainerdVersion,
};
use oci_image_builder::spin::{self, FileLayout};

/// The app dirs under `tests/apps` of the forms (see the module docs), whether each is
/// also run as an artifact, and the container's environment it needs to start.
const APPS: &[(&str, bool, &[&str])] = &[
    ("spin-hello", false, &[]),
    ("sdk2-http", false, &[]),
    ("sdk6-http", true, &[]),
    ("spin1-http", false, &[]),
    ("wasi-wagi-p1", false, &[]),
    ("mw-app", true, &[]),
    // Its ticks go nowhere (nothing listens on the discard port): it only has to load.
    ("spin-cron-trigger", false, &["RECORD_ADDRESS=127.0.0.1:9"]),
];

/// The value of `key=<n>` in `line`.
fn field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Runs `image` with `env` and returns the runtime's `app loaded` line from its log.
fn loaded_line(c: &Containerd, dir: &Path, image: &str, env: &[&str]) -> Result<String> {
    let log = dir.join(format!("{}.log", unique("app")));
    let mut args = vec!["--log-uri".to_string(), format!("file://{}", log.display())];
    for e in env {
        args.extend(["--env".to_string(), e.to_string()]);
    }
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let app = c
        .run_spin_app(image, &args)
        .map_err(|e| anyhow::anyhow!("{image}: {e:#}\nits log:\n{}", read()))?;
    let line = wait_for(Duration::from_secs(60), || {
        read()
            .lines()
            .find(|l| l.contains("app loaded"))
            .map(str::to_string)
    })
    .with_context(|| {
        format!(
            "{image}: no `app loaded` line within 60 s; its log:\n{}",
            read()
        )
    })?;
    drop(app);
    Ok(line)
}

fn every_form_loads_only_what_the_shim_compiled() -> Result<()> {
    require_shim()?;
    let node = tempfile::Builder::new()
        .prefix("plan-")
        .tempdir_in("/tmp")?;
    let config = ContainerdConfig {
        env: vec![(
            "SPIN_SHIM_COMPILE_CACHE_DIR".into(),
            node.path().join("compile-cache").display().to_string(),
        )],
        ..Default::default()
    };
    let c = Containerd::start_with(ContainerdVersion::V1_7, CgroupMode::Host, &config)?;
    let dir = tempfile::tempdir()?;
    let mut drifted = Vec::new();
    for (app, artifact, env) in APPS {
        let app_dir = workspace_root().join("tests/apps").join(app);
        let mut forms = vec![(
            format!("docker.io/library/plan-{app}:container"),
            spin::container_image(
                &format!("docker.io/library/plan-{app}:container"),
                &app_dir,
                &[],
            )?,
            false,
        )];
        if *artifact {
            let name = format!("docker.io/library/plan-{app}:artifact");
            forms.push((
                name.clone(),
                spin::artifact_image(&name, &app_dir, FileLayout::Simple)?,
                true,
            ));
        }
        for (name, image, wasm) in forms {
            let tar = dir.path().join(format!("{}.tar", unique("img")));
            image.write_archive(&tar)?;
            c.import(&tar, wasm)?;
            let line = loaded_line(&c, dir.path(), &name, env)?;
            let compiled = field(&line, "compiled").with_context(|| format!("{name}: {line}"))?;
            let hits = field(&line, "cache_hits").with_context(|| format!("{name}: {line}"))?;
            println!("{name}: compiled={compiled} cache_hits={hits}");
            if compiled != 0 || hits == 0 {
                drifted.push(format!(
                    "{name}: the runtime compiled {compiled} unit(s) and loaded {hits} from \
                     the shim's entries: `{line}`"
                ));
            }
        }
    }
    ensure!(
        drifted.is_empty(),
        "the shim's precompile and the runtime's load disagree:\n{}",
        drifted.join("\n")
    );
    Ok(())
}

#[test]
fn every_app_form_loads_only_what_the_shim_compiled() {
    let Some(_s) = root_test("every_app_form_loads_only_what_the_shim_compiled") else {
        return;
    };
    every_form_loads_only_what_the_shim_compiled().unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn field_reads_counts_of_the_app_loaded_line() {
    let line = "2026-12-06T10:00:00Z  INFO spin_runtime::runtime: app loaded app=a components=3 \
                compiled=0 cache_hits=2 baseline=1";
    assert_eq!(field(line, "compiled"), Some(0));
    assert_eq!(field(line, "cache_hits"), Some(2));
    assert_eq!(field(line, "nothing"), None);
}
