//! Every app of `tests/apps` built against a published Spin SDK (Rust spin-sdk 2 and 3 for
//! wasip1, 5 for wasip1 and wasip2, 6 for WASIp3; JavaScript through componentize-js; Python
//! spin-sdk 3, and 4 for WASIp3, through componentize-py), and Spin 4 HTTP middleware, through
//! `ctr run` with the shim on containerd 1.7, as a
//! spin-in-container image: every route answers exactly, twice (the first run compiles in the
//! shim, the second finds the node's compile cache). A component of 2 MiB or more (JavaScript,
//! Python) first starts on the shim's baseline (Winch) code: the test then waits for the
//! container to map the Cranelift entry the shim compiles meanwhile, and checks every route
//! again on that code. Prints one `sdk-apps(ctr):` line per app with the time from `ctr run`
//! to the first answer, cold and warm (and to Cranelift's code), and the app process's RSS. Root only: `cargo test --release -p integration --test sdk_apps -- --nocapture`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use integration::sdk_apps::{maps_entry, reserved_entry, rss_mib, SDK_APPS};
use integration::{
    require_shim, wait_for, CgroupMode, Containerd, ContainerdConfig, ContainerdVersion,
};
use oci_image_builder::spin;

fn run() -> Result<()> {
    require_shim()?;
    // A compile cache of this test's own, so that the first run of each app is cold.
    let cache = tempfile::tempdir()?;
    let config = ContainerdConfig {
        env: vec![(
            "SPIN_SHIM_COMPILE_CACHE_DIR".into(),
            cache.path().display().to_string(),
        )],
        ..Default::default()
    };
    let c = Containerd::start_with(ContainerdVersion::V1_7, CgroupMode::Host, &config)?;
    let dir = tempfile::tempdir()?;
    for app in SDK_APPS {
        app.require_built()?;
        let image = format!("docker.io/library/{}:sdk", app.dir);
        let tar = dir.path().join(format!("{}.tar", app.dir));
        spin::container_image(&image, &app.path(), &[])?.write_archive(&tar)?;
        c.import(&tar, false)?;
        let tiered = std::fs::metadata(app.wasm_path())?.len() >= TIER_MIN_BYTES;
        let mut firsts = Vec::new();
        let mut rss = 0;
        let mut routes = 0;
        let mut cranelift_in = None;
        for round in ["cold", "warm"] {
            let before = entries(cache.path())?;
            let t = Instant::now();
            let run = c.run_spin_app(&image, &[])?;
            run.get(app.routes[0].0)?;
            firsts.push(t.elapsed());
            routes = app
                .check_routes(|p| run.get(p))
                .with_context(|| format!("{round} run"))?;
            let pid = c
                .task_list()?
                .into_iter()
                .find(|t| t.0 == run.id)
                .map(|t| t.1 as u32)
                .with_context(|| format!("{}: task {} not listed", app.dir, run.id))?;
            if tiered && round == "cold" {
                // Started on the shim's baseline code; the shim compiles Cranelift's into
                // the entry it reserved (named after it), and the container maps it in.
                let cranelift = entries(cache.path())?
                    .into_iter()
                    .filter(|e| !before.contains(e))
                    .find_map(|e| reserved_entry(&e).map(str::to_string))
                    .with_context(|| {
                        format!(
                            "{}: {} bytes of Wasm, but the shim reserved no Cranelift entry \
                             (no tiered start)\n{}",
                            app.dir,
                            std::fs::metadata(app.wasm_path()).map_or(0, |m| m.len()),
                            c.log_tail(30)
                        )
                    })?;
                wait_for(Duration::from_secs(300), || {
                    maps_entry(pid, &cranelift).then_some(())
                })
                .with_context(|| {
                    format!(
                        "{}: the container did not map the shim's Cranelift entry {cranelift} \
                         within 300 s\n{}",
                        app.dir,
                        c.log_tail(30)
                    )
                })?;
                cranelift_in = Some(t.elapsed());
                app.check_routes(|p| run.get(p))
                    .context("after the swap to Cranelift's code")?;
            }
            rss = rss_mib(pid);
            c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &run.id])?;
            c.wait_task_status(&run.id, "STOPPED", Duration::from_secs(20))
                .with_context(|| format!("{}: SIGTERM ({round})", app.dir))?;
            drop(run);
        }
        println!(
            "sdk-apps(ctr): {} | {routes}/{} routes | cold {} ms{} | warm {} ms | RSS {rss} MiB",
            app.label(),
            app.routes.len(),
            firsts[0].as_millis(),
            cranelift_in.map_or(String::new(), |d| format!(
                " (baseline code; Cranelift's in at {} ms)",
                d.as_millis()
            )),
            firsts[1].as_millis()
        );
    }
    Ok(())
}

/// The runtime's default size from which a component starts on baseline code.
const TIER_MIN_BYTES: u64 = 2 << 20;

/// The file names in the compile cache directory.
fn entries(dir: &std::path::Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        out.push(e?.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}

#[test]
fn every_sdk_app_serves_through_ctr_run_on_containerd_1_7() {
    let Some(_s) = integration::root_test("every_sdk_app_serves_through_ctr_run_on_containerd_1_7")
    else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}
