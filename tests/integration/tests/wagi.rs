//! The WAGI executor through the shim: `tests/apps/wasi-wagi-p1` (a WASI preview 1 command
//! as Spin's `examples/wagi-http-rust` builds one) as a spin-in-container image, `ctr run`
//! on containerd 1.7. Root only: `cargo test --release --workspace --test wagi`.

use std::time::Duration;

use anyhow::{Context, Result};
use integration::{require_shim, wait_for, CgroupMode, Containerd, ContainerdVersion};
use oci_image_builder::spin;

#[test]
fn wagi_apps_serve_through_ctr_run() {
    let Some(_s) = integration::root_test("wagi_apps_serve_through_ctr_run") else {
        return;
    };
    (|| -> Result<()> {
        require_shim()?;
        let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
        let dir = tempfile::tempdir()?;
        let app_dir = integration::workspace_root().join("tests/apps/wasi-wagi-p1");
        let image = "docker.io/library/wagi-app:test";
        let tar = dir.path().join("wagi.tar");
        spin::container_image(image, &app_dir, &[])?.write_archive(&tar)?;
        c.import(&tar, false)?;
        let run = c.run_spin_app(image, &[])?;
        wait_for(Duration::from_secs(30), || {
            integration::http_get(run.port, "/wagi/echo").ok()
        })
        .with_context(|| format!("no answer on port {}\n{}", run.port, c.log_tail(30)))?;
        integration::app_forms::check_wagi_routes(|p| integration::http_get(run.port, p))?;
        println!(
            "wagi(ctr): /wagi/echo /wagi/created /wagi/fail /custom/echo answered as expected"
        );
        Ok(())
    })()
    .unwrap_or_else(|e| panic!("{e:#}"));
}
