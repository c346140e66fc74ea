//! `spin-serve <app-dir | spin.toml | locked-app.json> [--listen ADDR] [-- ARGS...]`: runs
//! a Spin app (a directory holding `spin.toml`, a manifest, or a locked-app JSON whose
//! content is referenced by `file://` URL or inline) without containerd, for development,
//! tests and benchmarks: its HTTP triggers on a local port, and its Redis, MQTT, cron and
//! command triggers.
//!
//! Prints `spin-serve: listening on http://ADDR` on stdout once the port is bound (with
//! `--listen 127.0.0.1:0` a free port is chosen), and `spin-serve: ready` once every
//! trigger runs. SIGTERM/SIGINT drain and exit 0. A command trigger gets `ARGS` and the
//! process exits with its exit code.
//!
//! Like `spin up`, a `.env` file in the app directory supplies `SPIN_VARIABLE_<NAME>` values
//! that the process environment does not set (Spin's env variables provider falls back to
//! its dotenv file for exactly those keys; the environment wins).

use std::path::PathBuf;

/// The musl builds (the release binaries) allocate with mimalloc: with musl's own malloc the
/// request path costs about a third more than in the glibc build.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn usage() -> ! {
    eprintln!(
        "usage: spin-serve <app-dir | spin.toml | locked-app.json> [--listen 127.0.0.1:PORT] [-- ARGS...]"
    );
    std::process::exit(2)
}

fn main() {
    spin_runtime::quiet_library_backtraces();
    let mut args = std::env::args().skip(1);
    let mut app_dir: Option<PathBuf> = None;
    let mut listen: Option<String> = None;
    let mut guest_args: Vec<String> = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = Some(args.next().unwrap_or_else(|| usage())),
            "--" => {
                guest_args = args.by_ref().collect();
                break;
            }
            "-h" | "--help" => usage(),
            _ if app_dir.is_none() => app_dir = Some(PathBuf::from(arg)),
            _ => usage(),
        }
    }
    let Some(source) = app_dir else { usage() };
    let mut env = spin_shim_settings::process_env();
    if let Some(l) = listen {
        env.push((spin_runtime::runtime::LISTEN_ENV.to_string(), l));
    }
    // Every setting is checked before the app is loaded.
    if let Err(e) = spin_shim_settings::serve::ServeSettings::init(&env) {
        eprintln!("spin-serve: {e}");
        std::process::exit(1)
    }
    match run(&source, &env, &guest_args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("spin-serve: {e:#}");
            std::process::exit(1)
        }
    }
}

fn run(
    source: &std::path::Path,
    env: &[(String, String)],
    guest_args: &[String],
) -> anyhow::Result<i32> {
    spin_runtime::init_tracing(env);
    let (app, app_dir) = if source.is_dir() {
        let app = spin_runtime::App::load_manifest(&source.join(spin_runtime::MANIFEST_FILE))?;
        (app, source.to_path_buf())
    } else {
        let dir = match source.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let app = if source.extension().is_some_and(|e| e == "json") {
            // Only a regular file, and no more than a locked app may be (a FIFO or a
            // device here would hang or feed the parser forever).
            let bytes = spin_app_format::untrusted::read_regular(
                source,
                spin_app_format::untrusted::MAX_DOCUMENT_BYTES,
                "locked app",
            )?;
            spin_runtime::App::from_locked_json(&bytes, &spin_runtime::app::FileUrlResolver)?
        } else {
            spin_runtime::App::load_manifest(source)?
        };
        (app, dir)
    };
    let mut env = env.to_vec();
    env.extend(dotenv_variables(&app_dir, &env)?);
    spin_runtime::Runner::new(app)
        .dir(&app_dir)
        .env(&env)
        .args(guest_args)
        .on_ready(|addr| {
            use std::io::Write;
            if let Some(addr) = addr {
                println!("spin-serve: listening on http://{addr}");
            }
            println!("spin-serve: ready");
            let _ = std::io::stdout().flush();
        })
        .run()
}

/// The `SPIN_VARIABLE_*` entries of `app_dir/.env` not already in `env` (none if there is no
/// `.env`). A malformed file is an error naming it and the line.
fn dotenv_variables(
    app_dir: &std::path::Path,
    env: &[(String, String)],
) -> anyhow::Result<Vec<(String, String)>> {
    let path = app_dir.join(".env");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let prefix = spin_runtime::host::variables::SPIN_VARIABLE_PREFIX;
    let mut out = Vec::new();
    let iter = dotenvy::from_path_iter(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    for item in iter {
        let (key, value) = item.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if key.starts_with(prefix) && !env.iter().any(|(k, _)| *k == key) {
            out.push((key, value));
        }
    }
    Ok(out)
}
