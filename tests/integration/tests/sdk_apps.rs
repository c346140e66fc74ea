//! Every app of `tests/apps` built against a published Spin SDK (Rust spin-sdk 2 and 3 for
//! wasip1, 5 for wasip1 and wasip2, 6 for WASIp3; JavaScript through componentize-js; Python
//! spin-sdk 3, and 4 for WASIp3, through componentize-py), and Spin 4 HTTP middleware, through
//! `ctr run` with the shim on containerd 1.7, as a
//! spin-in-container image: every route answers exactly, twice (the first run compiles in the
//! shim, the second finds the node's compile cache). Prints one `sdk-apps(ctr):` line per
//! app with the time from `ctr run` to the first answer, cold and warm, and the app
//! process's RSS. Root only: `cargo test --release -p integration --test sdk_apps -- --nocapture`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use integration::sdk_apps::{rss_mib, SDK_APPS};
use integration::{require_shim, CgroupMode, Containerd, ContainerdConfig, ContainerdVersion};
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
        let mut firsts = Vec::new();
        let mut rss = 0;
        let mut routes = 0;
        for round in ["cold", "warm"] {
            let t = Instant::now();
            let run = c.run_spin_app(&image, &[])?;
            run.get(app.routes[0].0)?;
            firsts.push(t.elapsed());
            routes = app
                .check_routes(|p| run.get(p))
                .with_context(|| format!("{round} run"))?;
            if let Some(t) = c.task_list()?.into_iter().find(|t| t.0 == run.id) {
                rss = rss_mib(t.1 as u32);
            }
            c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &run.id])?;
            c.wait_task_status(&run.id, "STOPPED", Duration::from_secs(20))
                .with_context(|| format!("{}: SIGTERM ({round})", app.dir))?;
            drop(run);
        }
        println!(
            "sdk-apps(ctr): {} | {routes}/{} routes | cold {} ms | warm {} ms | RSS {rss} MiB",
            app.label(),
            app.routes.len(),
            firsts[0].as_millis(),
            firsts[1].as_millis()
        );
    }
    Ok(())
}

#[test]
fn every_sdk_app_serves_through_ctr_run_on_containerd_1_7() {
    let Some(_s) = integration::root_test("every_sdk_app_serves_through_ctr_run_on_containerd_1_7")
    else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}
