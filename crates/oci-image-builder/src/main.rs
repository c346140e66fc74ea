//! `oci-image-builder`: writes OCI image archives for `ctr image import`.
//! See the library documentation for the forms and the import commands.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use oci_image_builder::{rootfs_image, spin, wasi_image, Image, ProcessConfig, TarTree};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    about = "Writes OCI image-layout archives that `ctr image import` accepts",
    after_help = "Import: ctr image import out.tar (linux/amd64 forms); \
                  ctr image import --all-platforms out.tar (spin-artifact, wasm-component); \
                  add --no-unpack for Spin artifacts on containerd 1.6."
)]
struct Cli {
    #[command(subcommand)]
    form: Form,
}

#[derive(clap::Args)]
struct Common {
    /// Full image name, e.g. docker.io/library/hello:latest
    #[arg(long)]
    name: String,
    /// Output archive path
    #[arg(short, long)]
    output: PathBuf,
}

#[derive(Subcommand)]
enum Form {
    /// A .wasm file at / as entrypoint (linux/amd64 image)
    Wasi {
        #[command(flatten)]
        common: Common,
        /// The .wasm file
        #[arg(long)]
        wasm: PathBuf,
        /// Cmd arguments (repeatable)
        #[arg(long = "arg")]
        args: Vec<String>,
        /// NAME=VALUE (repeatable)
        #[arg(long)]
        env: Vec<String>,
    },
    /// A native rootfs from a directory and/or listed files
    Native {
        #[command(flatten)]
        common: Common,
        /// Host directory copied to / (optional)
        #[arg(long)]
        rootfs: Option<PathBuf>,
        /// HOST_PATH:IMAGE_PATH (repeatable)
        #[arg(long = "file")]
        files: Vec<String>,
        /// IMAGE_PATH:TARGET symlink (repeatable)
        #[arg(long = "symlink")]
        symlinks: Vec<String>,
        /// Entrypoint element (repeatable)
        #[arg(long)]
        entrypoint: Vec<String>,
        /// Cmd element (repeatable)
        #[arg(long)]
        cmd: Vec<String>,
        /// NAME=VALUE (repeatable)
        #[arg(long)]
        env: Vec<String>,
    },
    /// spin-in-container: rootfs with /spin.toml and the component files, cmd /
    SpinContainer {
        #[command(flatten)]
        common: Common,
        /// Spin app directory (holds spin.toml)
        #[arg(long)]
        app: PathBuf,
        /// NAME=VALUE (repeatable)
        #[arg(long)]
        env: Vec<String>,
    },
    /// Spin OCI artifact as `spin registry push` writes it
    SpinArtifact {
        #[command(flatten)]
        common: Common,
        /// Spin app directory (holds spin.toml)
        #[arg(long)]
        app: PathBuf,
        /// One tar+gzip archive layer per component instead of one layer per file
        #[arg(long)]
        archive_layers: bool,
    },
    /// Single application/wasm layer (wkg form), served at /... by the Spin executor
    WasmComponent {
        #[command(flatten)]
        common: Common,
        /// The component .wasm file
        #[arg(long)]
        wasm: PathBuf,
    },
    /// Verify an archive's digests and print its index, manifest and config
    Inspect {
        /// The archive
        archive: PathBuf,
    },
}

fn split_pair<'a>(s: &'a str, what: &str) -> Result<(&'a str, &'a str)> {
    s.split_once(':')
        .with_context(|| format!("{what} {s:?} must look like A:B"))
}

fn write(common: &Common, image: Image) -> Result<()> {
    let w = image.write_archive(&common.output)?;
    println!(
        "wrote {} ({}, manifest {})",
        common.output.display(),
        w.name,
        w.manifest_digest
    );
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().form {
        Form::Wasi {
            common,
            wasm,
            args,
            env,
        } => {
            let img = wasi_image(&common.name, &wasm, &args, &env)?;
            write(&common, img)
        }
        Form::Native {
            common,
            rootfs,
            files,
            symlinks,
            entrypoint,
            cmd,
            env,
        } => {
            let mut tree = TarTree::new();
            if let Some(dir) = rootfs {
                tree.add_host_tree(&dir, "")?;
            }
            for f in &files {
                let (host, dest) = split_pair(f, "--file")?;
                tree.add_host_file(host.as_ref(), dest)?;
            }
            for s in &symlinks {
                let (path, target) = split_pair(s, "--symlink")?;
                tree.add_symlink(path, target)?;
            }
            let process = ProcessConfig {
                entrypoint,
                cmd,
                env,
                ..Default::default()
            };
            write(&common, rootfs_image(&common.name, tree, &process)?)
        }
        Form::SpinContainer { common, app, env } => {
            let img = spin::container_image(&common.name, &app, &env)?;
            write(&common, img)
        }
        Form::SpinArtifact {
            common,
            app,
            archive_layers,
        } => {
            let layout = if archive_layers {
                spin::FileLayout::Archive
            } else {
                spin::FileLayout::Simple
            };
            write(&common, spin::artifact_image(&common.name, &app, layout)?)
        }
        Form::WasmComponent { common, wasm } => {
            write(&common, spin::wasm_component_image(&common.name, &wasm)?)
        }
        Form::Inspect { archive } => {
            let bytes = std::fs::read(&archive)
                .with_context(|| format!("cannot read {}", archive.display()))?;
            let c = oci_image_builder::read_archive(&bytes)?;
            println!("index: {}", serde_json::to_string_pretty(&c.index)?);
            println!("manifest: {}", serde_json::to_string_pretty(&c.manifest)?);
            println!("config: {}", serde_json::to_string_pretty(&c.config)?);
            println!("digests verified: {} layers", c.layers.len());
            Ok(())
        }
    }
}
