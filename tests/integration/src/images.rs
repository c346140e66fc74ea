//! The test images, built with `oci-image-builder` into a directory.

use crate::{guest_apps_dir, output_with_timeout, workspace_root};
use anyhow::{ensure, Context, Result};
use oci_image_builder::{rootfs_image, wasi_image, ProcessConfig, TarTree};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Name of the WASI hello image (entrypoint `/wasi-hello.wasm`).
pub const WASI_HELLO: &str = "docker.io/library/wasi-hello:test";
/// Name of the WASI hello core-module (wasip1) image.
pub const WASI_HELLO_P1: &str = "docker.io/library/wasi-hello-p1:test";
/// Name of the busybox-style image (static busybox, Cmd `/bin/sh`).
pub const BUSYBOX: &str = "docker.io/library/busybox:test";
/// Name of the pause image (entrypoint `/pause`).
pub const PAUSE: &str = "docker.io/library/pause:test";

/// Archive paths of the test images.
#[derive(Debug, Clone)]
pub struct TestImages {
    /// WASI hello (component).
    pub wasi_hello: PathBuf,
    /// WASI hello core module, when the wasip1 build exists.
    pub wasi_hello_p1: Option<PathBuf>,
    /// Busybox-style native image.
    pub busybox: PathBuf,
    /// Pause image.
    pub pause: PathBuf,
}

/// Busybox applets linked in the busybox image's `/bin`.
pub const BUSYBOX_APPLETS: &[&str] = &[
    "sh", "ls", "cat", "echo", "sleep", "true", "false", "env", "id", "ps", "kill", "grep",
];

/// Compiles `tests/images/pause/pause.c` statically into `out`.
pub fn build_pause_binary(out: &Path) -> Result<()> {
    let src = workspace_root().join("tests/images/pause/pause.c");
    let o = output_with_timeout(
        Command::new("gcc")
            .args(["-static", "-O2", "-o"])
            .arg(out)
            .arg(&src),
        Duration::from_secs(120),
    )?;
    ensure!(
        o.status.success(),
        "gcc -static failed for {} (install gcc and libc6-dev): {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

impl TestImages {
    /// Builds every test image archive into `dir`.
    pub fn build(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let apps = guest_apps_dir();
        let wasm = apps.join("wasi-hello.wasm");
        ensure!(
            wasm.is_file(),
            "{} is missing: run `make apps`",
            wasm.display()
        );
        let wasi_hello = dir.join("wasi-hello.tar");
        wasi_image(WASI_HELLO, &wasm, &[], &[])?.write_archive(&wasi_hello)?;

        let p1 = apps.join("../../wasm32-wasip1/release/wasi-hello-p1.wasm");
        let wasi_hello_p1 = if p1.is_file() {
            let out = dir.join("wasi-hello-p1.tar");
            wasi_image(WASI_HELLO_P1, &p1, &[], &[])?.write_archive(&out)?;
            Some(out)
        } else {
            None
        };

        let busybox_bin = Path::new("/bin/busybox");
        ensure!(
            busybox_bin.is_file(),
            "/bin/busybox is missing: apt-get install busybox-static (scripts/setup.sh)"
        );
        let mut t = TarTree::new();
        t.add_host_file(busybox_bin, "bin/busybox")?;
        for a in BUSYBOX_APPLETS {
            t.add_symlink(&format!("bin/{a}"), "busybox")?;
        }
        let busybox = dir.join("busybox.tar");
        rootfs_image(
            BUSYBOX,
            t,
            &ProcessConfig {
                cmd: vec!["/bin/sh".into()],
                ..Default::default()
            },
        )?
        .write_archive(&busybox)?;

        let pause_bin = dir.join("pause");
        build_pause_binary(&pause_bin)?;
        let mut t = TarTree::new();
        t.add_host_file(&pause_bin, "pause")
            .context("pause binary")?;
        let pause = dir.join("pause.tar");
        rootfs_image(
            PAUSE,
            t,
            &ProcessConfig {
                entrypoint: vec!["/pause".into()],
                ..Default::default()
            },
        )?
        .write_archive(&pause)?;
        Ok(Self {
            wasi_hello,
            wasi_hello_p1,
            busybox,
            pause,
        })
    }
}
