//! `spin-serve <app-dir> [--listen ADDR]`: serves a Spin app directory (holding
//! `spin.toml`) on a local port without containerd, for development, tests and benchmarks.
//!
//! Prints `spin-serve: listening on http://ADDR` on stdout once the port is bound (with
//! `--listen 127.0.0.1:0` a free port is chosen). SIGTERM/SIGINT drain and exit 0.

use std::path::PathBuf;

fn usage() -> ! {
    eprintln!("usage: spin-serve <app-dir | spin.toml> [--listen 127.0.0.1:PORT]");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut app_dir: Option<PathBuf> = None;
    let mut listen: Option<String> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = Some(args.next().unwrap_or_else(|| usage())),
            "-h" | "--help" => usage(),
            _ if app_dir.is_none() => app_dir = Some(PathBuf::from(arg)),
            _ => usage(),
        }
    }
    let Some(mut app_dir) = app_dir else { usage() };
    if app_dir.is_file() {
        app_dir = app_dir
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
    }
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    if let Some(l) = listen {
        env.push((spin_runtime::runtime::LISTEN_ENV.to_string(), l));
    }
    match run(&app_dir, &env) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("spin-serve: {e:#}");
            std::process::exit(1)
        }
    }
}

fn run(app_dir: &std::path::Path, env: &[(String, String)]) -> anyhow::Result<i32> {
    use anyhow::Context;
    spin_runtime::init_tracing(env);
    let app = spin_runtime::App::load_manifest(&app_dir.join(spin_runtime::MANIFEST_FILE))?;
    let config = spin_runtime::RuntimeConfig::from_env(app_dir, env)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(async {
        let shutdown = spin_runtime::shutdown_signal()?;
        spin_runtime::serve_app(
            app,
            &config,
            |addr| {
                use std::io::Write;
                println!("spin-serve: listening on http://{addr}");
                let _ = std::io::stdout().flush();
            },
            shutdown,
        )
        .await
    })?;
    Ok(0)
}
