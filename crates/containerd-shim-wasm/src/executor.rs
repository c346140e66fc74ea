//! The workload executor run inside each container's init process (after pivot_root).
//!
//! The entrypoint decides what runs: a `.wasm` file runs on wasmtime (WASI), command `/`
//! with `/spin.toml` runs the Spin engine, an ELF binary or a shebang script runs natively
//! through libcontainer's default executor, and anything else is refused with an error
//! naming the entrypoint.

use std::path::{Path, PathBuf};

use libcontainer::oci_spec::runtime::Spec;
use libcontainer::workload::default::DefaultExecutor;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};

use crate::wasi;

/// Runs a Spin application from `app_dir` (`/spin.toml`, or the artifact the shim
/// materialised under [`crate::image::APP_DIR`]) with the container's environment;
/// returns the process exit code. Provided by the binary crate.
pub type SpinRunner = fn(&Path, &[(String, String)]) -> anyhow::Result<i32>;

/// What a container's entrypoint resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// A WASI program (core module or component) at this path.
    Wasi(PathBuf),
    /// A Spin application whose manifest is `/spin.toml`.
    Spin,
    /// An ELF binary or shebang script: run natively.
    Native,
}

/// Classifies an entrypoint. `root` is the container's root directory (`/` inside the
/// container; a rootfs path in tests), `path_env` is the container's `PATH`, `cwd` the
/// process's working directory inside the container.
pub fn classify(
    args: &[String],
    path_env: Option<&str>,
    cwd: &Path,
    root: &Path,
) -> Result<Workload, String> {
    let Some(entry) = args.first() else {
        return Err("the container has no process args: set an entrypoint or command".into());
    };
    if entry == "/" {
        if root.join("spin.toml").is_file()
            || root
                .join(crate::image::APP_DIR)
                .join(crate::image::LOCKED_FILE)
                .is_file()
        {
            return Ok(Workload::Spin);
        }
        return Err(format!(
            "entrypoint `/` needs a Spin manifest at /spin.toml in the container image or a Spin OCI artifact image (config architecture `wasm`), found neither under {}",
            root.display()
        ));
    }
    let resolved = resolve(entry, path_env, cwd, root).ok_or_else(|| {
        format!("entrypoint `{entry}` was not found in the container rootfs (searched PATH)")
    })?;
    let host_path = root.join(resolved.strip_prefix("/").unwrap_or(&resolved));
    if entry.ends_with(".wasm") {
        return Ok(Workload::Wasi(resolved));
    }
    let mut head = [0u8; 4];
    let n = read_head(&host_path, &mut head).map_err(|e| {
        format!(
            "cannot read entrypoint `{entry}` ({}): {e}",
            host_path.display()
        )
    })?;
    let head = &head[..n];
    if head.starts_with(b"\x7fELF") || head.starts_with(b"#!") {
        Ok(Workload::Native)
    } else if head.starts_with(b"\0asm") {
        Ok(Workload::Wasi(resolved))
    } else {
        Err(format!(
            "entrypoint `{entry}` is neither a .wasm file, `/` with /spin.toml, an ELF binary nor a shebang script"
        ))
    }
}

fn read_head(path: &Path, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut n = 0;
    while n < buf.len() {
        let r = f.read(&mut buf[n..])?;
        if r == 0 {
            break;
        }
        n += r;
    }
    Ok(n)
}

/// Resolves `entry` the way execvp does: a name containing `/` is used as is (relative to
/// `cwd`), other names are searched in `PATH`, then (for `.wasm` files) in `cwd`.
/// Returns the in-container path.
fn resolve(entry: &str, path_env: Option<&str>, cwd: &Path, root: &Path) -> Option<PathBuf> {
    let in_root = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let in_cwd = || {
        let p = cwd.join(entry);
        in_root(&p).is_file().then_some(p)
    };
    if entry.contains('/') {
        return in_cwd();
    }
    let path_env =
        path_env.unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    path_env
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(entry))
        .find(|p| in_root(p).is_file())
        .or_else(|| entry.ends_with(".wasm").then(in_cwd).flatten())
}

fn spec_args_env(spec: &Spec) -> (Vec<String>, Vec<(String, String)>) {
    let process = spec.process().as_ref();
    let args = process.and_then(|p| p.args().clone()).unwrap_or_default();
    let env = process
        .and_then(|p| p.env().clone())
        .unwrap_or_default()
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        })
        .collect();
    (args, env)
}

/// The shim's libcontainer executor (see the module docs).
#[derive(Clone)]
pub struct ShimExecutor {
    spin: Option<SpinRunner>,
}

impl ShimExecutor {
    /// An executor; `spin` runs Spin apps (None: Spin entrypoints are refused).
    pub fn new(spin: Option<SpinRunner>) -> Self {
        Self { spin }
    }

    fn workload(&self, spec: &Spec) -> Result<Workload, String> {
        let (args, env) = spec_args_env(spec);
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let cwd = spec
            .process()
            .as_ref()
            .map(|p| p.cwd().clone())
            .unwrap_or_else(|| PathBuf::from("/"));
        let w = classify(&args, path, &cwd, Path::new("/"))?;
        if w == Workload::Spin && self.spin.is_none() {
            return Err("Spin engine not available in this build of the shim".into());
        }
        Ok(w)
    }
}

/// Makes SIGTERM and SIGINT end the process with 128+signal: PID 1 of a pid namespace
/// ignores signals it has no handler for.
pub fn install_termination_handlers() {
    extern "C" fn on_signal(sig: libc::c_int) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) }
    }
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: installing a handler that only calls _exit.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

impl Executor for ShimExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        let workload = self.workload(spec).map_err(ExecutorError::Other)?;
        let (args, env) = spec_args_env(spec);
        let code = match workload {
            Workload::Native => return DefaultExecutor {}.exec(spec),
            Workload::Wasi(path) => {
                install_termination_handlers();
                wasi::run(&path, &args, &env)
            }
            Workload::Spin => {
                // The Spin engine installs its own SIGTERM/SIGINT handling (graceful
                // drain, exit 0); a handler of ours would be chained in and exit 143.
                let run = self.spin.expect("checked in workload()");
                match run(Path::new("/"), &env) {
                    Ok(code) => code,
                    Err(e) => {
                        eprintln!("Error: {e:#}");
                        1
                    }
                }
            }
        };
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        std::process::exit(code)
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        match self.workload(spec) {
            Ok(Workload::Native) => DefaultExecutor {}.validate(spec),
            Ok(_) => Ok(()),
            Err(e) => Err(ExecutorValidationError::ArgValidationError(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn classifies_entrypoints() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("bin")).unwrap();
        std::fs::write(r.join("app.wasm"), b"\0asm\x01\0\0\0").unwrap();
        std::fs::write(r.join("bin/sh"), b"\x7fELF\x02\x01").unwrap();
        std::fs::write(r.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
        std::fs::write(r.join("hello"), b"\0asm\x0d\0\x01\0").unwrap();
        std::fs::write(r.join("data.txt"), b"plain text").unwrap();

        assert_eq!(
            classify(&args(&["/app.wasm", "x"]), None, Path::new("/"), r).unwrap(),
            Workload::Wasi("/app.wasm".into())
        );
        assert_eq!(
            classify(&args(&["app.wasm"]), None, Path::new("/"), r).unwrap(),
            Workload::Wasi("/app.wasm".into())
        );
        assert_eq!(
            classify(
                &args(&["sh", "-c", "true"]),
                Some("/bin"),
                Path::new("/"),
                r
            )
            .unwrap(),
            Workload::Native
        );
        assert_eq!(
            classify(&args(&["/run.sh"]), None, Path::new("/"), r).unwrap(),
            Workload::Native
        );
        assert_eq!(
            classify(&args(&["/hello"]), None, Path::new("/"), r).unwrap(),
            Workload::Wasi("/hello".into())
        );
        let e = classify(&args(&["/data.txt"]), None, Path::new("/"), r).unwrap_err();
        assert!(e.contains("/data.txt"), "{e}");
        let e = classify(&args(&["/missing.wasm"]), None, Path::new("/"), r).unwrap_err();
        assert!(e.contains("/missing.wasm"), "{e}");
        let e = classify(&args(&["/"]), None, Path::new("/"), r).unwrap_err();
        assert!(e.contains("spin.toml"), "{e}");
        std::fs::write(r.join("spin.toml"), b"spin_manifest_version = 2").unwrap();
        assert_eq!(
            classify(&args(&["/"]), None, Path::new("/"), r).unwrap(),
            Workload::Spin
        );
        assert!(classify(&[], None, Path::new("/"), r).is_err());
    }
}
