//! The workload executor run inside each container's init process (after pivot_root).
//!
//! The entrypoint decides what runs: the first [`Engine`] whose
//! [`Engine::can_handle`] accepts it (the shim's engine, then the built-in WASI engine), else
//! an ELF binary or a shebang script runs natively through libcontainer's default executor;
//! anything else is refused with an error naming the entrypoint.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use libcontainer::oci_spec::runtime::Spec;
use libcontainer::workload::default::DefaultExecutor;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};

use crate::engine::{Engine, Entrypoint};
use crate::termination::open_termination_log;
pub use crate::termination::{
    install_termination_handlers, report_start_failure, termination_message,
    termination_message_path, DEFAULT_TERMINATION_MESSAGE_PATH, TERMINATION_MESSAGE_MAX,
};

/// What a container's entrypoint resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// The engine at this index of the executor's list.
    Engine(usize),
    /// An ELF binary or shebang script: run natively.
    Native,
}

/// Classifies an entrypoint against `engines` (in order), then native programs.
pub fn classify(engines: &[Arc<dyn Engine>], entry: &Entrypoint) -> Result<Workload, String> {
    let Some(first) = entry.args.first() else {
        return Err("the container has no process args: set an entrypoint or command".into());
    };
    for (i, e) in engines.iter().enumerate() {
        if e.can_handle(entry)? {
            return Ok(Workload::Engine(i));
        }
    }
    let resolved = entry.resolve().ok_or_else(|| {
        format!("entrypoint `{first}` was not found in the container rootfs (searched PATH)")
    })?;
    let host_path = entry.host_path(&resolved);
    let mut head = [0u8; 4];
    let n = crate::engine::read_head(&host_path, &mut head).map_err(|e| {
        format!(
            "cannot read entrypoint `{first}` ({}): {e}",
            host_path.display()
        )
    })?;
    let head = &head[..n];
    if head.starts_with(b"\x7fELF") || head.starts_with(b"#!") {
        Ok(Workload::Native)
    } else {
        let names: Vec<_> = engines.iter().map(|e| e.name()).collect();
        Err(format!(
            "entrypoint `{first}` is neither a program of the {} engines, an ELF binary nor a shebang script",
            names.join("/")
        ))
    }
}

/// Annotation the shim sets at Create on a cgroup v2 host that cannot enforce device
/// rules, with the reason; its executor then refuses native containers other than the pod
/// sandbox (any value a client sent is dropped first).
pub const DEVICE_FILTER_UNAVAILABLE: &str = "io.containerd.wasm-shim.device-filter-unavailable";

/// Annotation containerd's CRI plugin puts on every container: `sandbox` for the pod's
/// pause container, `container` for the others.
pub const CRI_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// Whether `spec` is a Kubernetes pod sandbox (the pause container).
pub fn is_pod_sandbox(spec: &Spec) -> bool {
    spec.annotations()
        .as_ref()
        .and_then(|a| a.get(CRI_CONTAINER_TYPE))
        .is_some_and(|t| t == "sandbox")
}

/// Why a native container may not run here: set when Create found that device rules
/// cannot be enforced and the container is not a pod sandbox.
fn native_refusal(spec: &Spec) -> Option<String> {
    let reason = spec
        .annotations()
        .as_ref()?
        .get(DEVICE_FILTER_UNAVAILABLE)?;
    if is_pod_sandbox(spec) {
        return None;
    }
    Some(format!(
        "refusing a native container: this cgroup v2 node cannot enforce device rules \
         ({reason}), so a native process with CAP_MKNOD could open the node's disks; only \
         the pod sandbox (pause) runs natively without them, Wasm containers are unaffected"
    ))
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

/// The spec's memory limit (`linux.resources.memory.limit`), when positive (`-1` and `0`
/// mean none).
pub fn spec_memory_limit(spec: &Spec) -> Option<u64> {
    let limit = spec
        .linux()
        .as_ref()?
        .resources()
        .as_ref()?
        .memory()
        .as_ref()?
        .limit()?;
    u64::try_from(limit).ok().filter(|l| *l > 0)
}

/// The shim's libcontainer executor (see the module docs).
#[derive(Clone)]
pub struct ShimExecutor {
    engines: Vec<Arc<dyn Engine>>,
}

/// A process's arguments.
type Args = Vec<String>;
/// A process's environment as name/value pairs.
type EnvPairs = Vec<(String, String)>;

impl ShimExecutor {
    /// An executor trying `engines` in order.
    pub fn new(engines: Vec<Arc<dyn Engine>>) -> Self {
        Self { engines }
    }

    fn workload(&self, spec: &Spec) -> Result<(Workload, Args, EnvPairs), String> {
        let (args, env) = spec_args_env(spec);
        let cwd = spec
            .process()
            .as_ref()
            .map(|p| p.cwd().clone())
            .unwrap_or_else(|| PathBuf::from("/"));
        let entry = Entrypoint {
            args: &args,
            env: &env,
            cwd: &cwd,
            root: Path::new("/"),
            memory_limit: spec_memory_limit(spec),
        };
        let w = classify(&self.engines, &entry)?;
        Ok((w, args, env))
    }
}

impl Executor for ShimExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        let (workload, args, env) = self.workload(spec).map_err(|e| {
            open_termination_log(spec);
            report_start_failure(&e);
            ExecutorError::Other(e)
        })?;
        let code = match workload {
            Workload::Native => return DefaultExecutor {}.exec(spec),
            Workload::Engine(i) => {
                // Still the only thread: the runtime's threads share the main arena.
                crate::memory::single_malloc_arena();
                // Until the engine's handlers are in place (each engine releases them).
                crate::termination::hold_termination_signals();
                open_termination_log(spec);
                // Checked at Create already (`validate`); kept for this process.
                if let Err(e) = spin_shim_settings::container::ContainerSettings::init(&env) {
                    let e = e.to_string();
                    report_start_failure(&e);
                    return Err(ExecutorError::Other(e));
                }
                let cwd = spec
                    .process()
                    .as_ref()
                    .map(|p| p.cwd().clone())
                    .unwrap_or_else(|| PathBuf::from("/"));
                self.engines[i].run(&Entrypoint {
                    args: &args,
                    env: &env,
                    cwd: &cwd,
                    root: Path::new("/"),
                    memory_limit: spec_memory_limit(spec),
                })
            }
        };
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        std::process::exit(code)
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        match self.workload(spec) {
            Ok((Workload::Native, _, _)) => match native_refusal(spec) {
                Some(msg) => Err(ExecutorValidationError::ArgValidationError(msg)),
                None => DefaultExecutor {}.validate(spec),
            },
            // A bad setting fails the Create, naming the variable and the fix.
            Ok((Workload::Engine(_), _, env)) => {
                spin_shim_settings::container::ContainerSettings::from_env(&env)
                    .map(|_| ())
                    .map_err(|e| ExecutorValidationError::ArgValidationError(e.to_string()))
            }
            Err(e) => Err(ExecutorValidationError::ArgValidationError(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasi::WasiEngine;

    /// Classifies `a` with the built-in WASI engine only, `r` as the container root.
    pub(crate) fn classify_in(
        r: &Path,
        a: &[&str],
        path: Option<&str>,
    ) -> Result<Workload, String> {
        let args: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = path
            .map(|p| vec![("PATH".to_string(), p.to_string())])
            .unwrap_or_default();
        let engines: Vec<Arc<dyn Engine>> = vec![Arc::new(WasiEngine)];
        classify(
            &engines,
            &Entrypoint {
                args: &args,
                env: &env,
                cwd: Path::new("/"),
                root: r,
                memory_limit: None,
            },
        )
    }

    fn spec_with_mounts(mounts: &[(&str, &str, &str, &[&str])]) -> Spec {
        use libcontainer::oci_spec::runtime::{MountBuilder, SpecBuilder};
        let mounts = mounts
            .iter()
            .map(|(typ, src, dst, opts)| {
                MountBuilder::default()
                    .typ(*typ)
                    .source(*src)
                    .destination(*dst)
                    .options(opts.iter().map(|o| o.to_string()).collect::<Vec<_>>())
                    .build()
                    .unwrap()
            })
            .collect::<Vec<_>>();
        SpecBuilder::default().mounts(mounts).build().unwrap()
    }

    #[test]
    fn finds_the_termination_message_file_among_spec_mounts() {
        let kubelet =
            "/var/lib/kubelet/pods/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/containers/app/5f2e8a1c";
        let proc_mount = ("proc", "proc", "/proc", &[][..]);
        let hosts = (
            "bind",
            "/var/lib/kubelet/pods/0f1e/etc-hosts",
            "/etc/hosts",
            &["rbind", "rprivate", "rw"][..],
        );
        // containerd's CRI turns kubelet's mount into a bind with an empty type on 1.6.
        let default_path = spec_with_mounts(&[
            proc_mount,
            hosts,
            (
                "",
                kubelet,
                "/dev/termination-log",
                &["rbind", "rprivate", "rw"],
            ),
        ]);
        assert_eq!(
            termination_message_path(&default_path),
            Some(PathBuf::from("/dev/termination-log"))
        );
        let custom = spec_with_mounts(&[
            proc_mount,
            hosts,
            ("bind", kubelet, "/tmp/why", &["rbind", "rw"]),
        ]);
        assert_eq!(
            termination_message_path(&custom),
            Some(PathBuf::from("/tmp/why"))
        );
        let volume = spec_with_mounts(&[
            proc_mount,
            hosts,
            (
                "bind",
                "/var/lib/kubelet/pods/0f1e/volumes/kubernetes.io~empty-dir/data",
                "/data",
                &["rbind", "rw"],
            ),
            ("tmpfs", "/pods/u/containers/a/b", "/scratch", &[]),
        ]);
        assert_eq!(termination_message_path(&volume), None);
        assert_eq!(termination_message_path(&spec_with_mounts(&[])), None);
    }

    #[test]
    fn termination_messages_are_escaped_and_bounded() {
        assert_eq!(
            termination_message("Spin app: variable `secret` has no value\n"),
            "Spin app: variable `secret` has no value"
        );
        assert_eq!(
            termination_message("a\x1b[31mred\r\0\tb\nc\n\n"),
            "a\\u{1b}[31mred\\r\\u{0}\tb\nc"
        );
        let long = "é".repeat(3000);
        let m = termination_message(&long);
        assert!(m.len() <= TERMINATION_MESSAGE_MAX, "{}", m.len());
        assert!(m.starts_with("éé") && m.ends_with("the container log has the whole error)"));
        let ctl = "\x07".repeat(2000);
        let m = termination_message(&ctl);
        assert!(
            m.len() <= TERMINATION_MESSAGE_MAX && m.starts_with("\\u{7}"),
            "{m}"
        );
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
        let wasi = Ok(Workload::Engine(0));

        assert_eq!(classify_in(r, &["/app.wasm", "x"], None), wasi);
        assert_eq!(classify_in(r, &["app.wasm"], None), wasi);
        assert_eq!(
            classify_in(r, &["sh", "-c", "true"], Some("/bin")),
            Ok(Workload::Native)
        );
        assert_eq!(classify_in(r, &["/run.sh"], None), Ok(Workload::Native));
        assert_eq!(classify_in(r, &["/hello"], None), wasi);
        let e = classify_in(r, &["/data.txt"], None).unwrap_err();
        assert!(e.contains("/data.txt"), "{e}");
        let e = classify_in(r, &["/missing.wasm"], None).unwrap_err();
        assert!(e.contains("/missing.wasm"), "{e}");
        assert!(classify_in(r, &["/"], None).is_err());
        assert!(classify_in(r, &[], None).is_err());
    }
}
