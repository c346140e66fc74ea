//! Runs a WASI program (a core module with `_start`, or a component exporting
//! `wasi:cli/run`) on wasmtime with the container's args, env, stdio and `/` preopened.
//!
//! In a container the process confines itself ([`crate::confine`]) once the preopens are open
//! and the engine exists, before it compiles the program or starts a thread: the program's
//! bytes are compiled and run confined. Without Landlock the guest gets the allowed
//! directories as preopens instead of `/`.

use std::path::{Path, PathBuf};

use crate::confine::Confinement;
use wasmtime::error::Context as _;
use wasmtime::{bail, Config, Engine, Linker, Module, Store};
use wasmtime_wasi::{
    FsPerms, I32Exit, ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

/// Container env var: how many seconds the program may run (`30`, `0.5`) before it
/// is stopped with [`TRAP_EXIT_CODE`]. No default: a WASI program is a job, and Kubernetes
/// leaves `activeDeadlineSeconds` unset by default too.
pub const DEADLINE_ENV: &str = spin_shim_settings::container::WASI_TIMEOUT;

/// Epoch tick of the deadline (as the Spin runtime's, 10 ms).
const EPOCH_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// Exit status reported when the program traps or cannot be loaded (as wasmtime's CLI:
/// 128 + SIGABRT).
pub const TRAP_EXIT_CODE: i32 = 134;

/// The kind of Wasm binary, from its preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WasmKind {
    /// A core module (`\0asm` version 1).
    Module,
    /// A component (`\0asm` layer 1).
    Component,
}

/// Reads the kind from the first 8 bytes of a Wasm binary.
pub fn wasm_kind(bytes: &[u8]) -> wasmtime::Result<WasmKind> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        bail!("not a WebAssembly binary (missing the \\0asm preamble)");
    }
    match bytes[6..8] {
        [0, 0] => Ok(WasmKind::Module),
        [1, 0] => Ok(WasmKind::Component),
        _ => bail!("unknown WebAssembly binary layer {:?}", &bytes[4..8]),
    }
}

struct ComponentState {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

fn builder(
    args: &[String],
    env: &[(String, String)],
    preopens: &[(PathBuf, String)],
) -> wasmtime::Result<WasiCtxBuilder> {
    let mut b = WasiCtxBuilder::new();
    b.inherit_stdio().args(args).envs(env);
    for (host, guest) in preopens {
        b.preopened_dir(host, guest, FsPerms::ReadWrite)
            .with_context(|| format!("preopening {} as {guest}", host.display()))?;
    }
    Ok(b)
}

/// Runs the program in the container (root `/`), confined by `confinement` before it is
/// compiled, and returns its exit code. Errors and traps are printed to stderr and give
/// [`TRAP_EXIT_CODE`].
pub fn run(
    path: &Path,
    args: &[String],
    env: &[(String, String)],
    confinement: &Confinement,
) -> i32 {
    let preopens: Vec<(PathBuf, String)> = confinement
        .guest_dirs(Path::new("/"), true)
        .into_iter()
        .map(|(host, rel)| (host, format!("/{}", rel.display())))
        .collect();
    match run_inner(path, args, env, &preopens, Some(confinement)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {} failed: {e:?}", path.display());
            crate::termination::report_start_failure(&format!("{} failed: {e:#}", path.display()));
            TRAP_EXIT_CODE
        }
    }
}

/// As [`run`], with the preopens given as (host dir, guest path) (tests use a temp dir at
/// `/`), the confinement optional (tests run unconfined) and errors returned.
pub fn run_inner(
    path: &Path,
    args: &[String],
    env: &[(String, String)],
    preopens: &[(PathBuf, String)],
    confinement: Option<&Confinement>,
) -> wasmtime::Result<i32> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let kind = wasm_kind(&bytes).with_context(|| format!("loading {}", path.display()))?;
    let deadline = spin_shim_settings::container::wasi_timeout(env)
        .map_err(|e| wasmtime::format_err!("{e}"))?;
    // Opened before confinement: the preopened directories (`/` itself may not be opened
    // once Landlock holds).
    let wasi = builder(args, env, preopens)?;
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(deadline.is_some());
    let engine = Engine::new(&config)?;
    if let Some(c) = confinement {
        c.apply()
            .map_err(|e| wasmtime::format_err!("confining the runtime process: {e:#}"))?;
    }
    if deadline.is_some() {
        let ticker = engine.weak();
        std::thread::spawn(move || {
            while let Some(engine) = ticker.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        });
    }
    let arm = |store: &mut dyn FnMut(u64)| {
        if let Some(d) = deadline {
            store((d.as_millis() / EPOCH_TICK.as_millis()) as u64 + 1);
        }
    };
    let result = match kind {
        WasmKind::Module => {
            let module = Module::new(&engine, &bytes)?;
            let mut linker: Linker<wasmtime_wasi::p1::WasiP1Ctx> = Linker::new(&engine);
            wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s| s)?;
            let mut wasi = wasi;
            let ctx = wasi.build_p1();
            let mut store = Store::new(&engine, ctx);
            arm(&mut |ticks| store.set_epoch_deadline(ticks));
            let instance = linker.instantiate(&mut store, &module)?;
            let start = instance
                .get_typed_func::<(), ()>(&mut store, "_start")
                .context("the module exports no `_start` function (not a WASI command)")?;
            start.call(&mut store, ())
        }
        WasmKind::Component => {
            let component = wasmtime::component::Component::new(&engine, &bytes)?;
            let mut linker = wasmtime::component::Linker::new(&engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
            let mut wasi = wasi;
            let state = ComponentState {
                ctx: wasi.build(),
                table: ResourceTable::new(),
            };
            let mut store = Store::new(&engine, state);
            arm(&mut |ticks| store.set_epoch_deadline(ticks));
            let command = wasmtime_wasi::p2::bindings::sync::Command::instantiate(
                &mut store, &component, &linker,
            )
            .context("the component does not export wasi:cli/run")?;
            match command.wasi_cli_run().call_run(&mut store) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(())) => return Ok(1),
                Err(e) => Err(e),
            }
        }
    };
    match result {
        Ok(()) => Ok(0),
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(exit) => Ok(exit.0),
            None if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) => {
                Err(e.context(format!(
                    "{} ran longer than its deadline of {:?} ({DEADLINE_ENV}) and was stopped",
                    path.display(),
                    deadline.unwrap_or_default()
                )))
            }
            None => Err(e),
        },
    }
}

/// The built-in engine: a WASI program (core module with `_start`, or a component
/// exporting `wasi:cli/run`) named by the entrypoint, a `.wasm` file or a file starting
/// with the `\0asm` preamble.
pub struct WasiEngine;

#[async_trait::async_trait]
impl crate::engine::Engine for WasiEngine {
    fn name(&self) -> &'static str {
        "wasi"
    }

    fn layer_media_types(&self) -> &'static [&'static str] {
        &[]
    }

    fn can_handle(&self, entry: &crate::engine::Entrypoint) -> Result<bool, String> {
        let Some(first) = entry.args.first() else {
            return Ok(false);
        };
        let Some(resolved) = entry.resolve() else {
            return Ok(false);
        };
        if first.ends_with(".wasm") {
            return Ok(true);
        }
        let mut head = [0u8; 4];
        let n = crate::engine::read_head(&entry.host_path(&resolved), &mut head).unwrap_or(0);
        Ok(head[..n].starts_with(b"\0asm"))
    }

    fn run(&self, entry: &crate::engine::Entrypoint) -> i32 {
        crate::termination::install_termination_handlers();
        let path = entry
            .resolve()
            .unwrap_or_else(|| PathBuf::from(&entry.args[0]));
        let confinement = crate::confine::Confinement::for_this_process();
        run(&path, entry.args, entry.env, &confinement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_kinds() {
        assert_eq!(wasm_kind(b"\0asm\x01\0\0\0").unwrap(), WasmKind::Module);
        assert_eq!(
            wasm_kind(b"\0asm\x0d\0\x01\0").unwrap(),
            WasmKind::Component
        );
        assert!(wasm_kind(b"\x7fELF\x02\x01\x01\0").is_err());
        assert!(wasm_kind(b"\0as").is_err());
    }

    /// A module that exits with the code given as its first argument's length.
    #[test]
    fn module_exit_code_and_trap() {
        let d = tempfile::tempdir().unwrap();
        let exit3 = wat_module(
            r#"(module
                 (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
                 (memory (export "memory") 1)
                 (func (export "_start") (call $exit (i32.const 3))))"#,
        );
        let p = d.path().join("exit3.wasm");
        std::fs::write(&p, exit3).unwrap();
        assert_eq!(
            run_inner(&p, &["exit3".into()], &[], &at_root(d.path()), None).unwrap(),
            3
        );

        let trap = wat_module(
            r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#,
        );
        let p = d.path().join("trap.wasm");
        std::fs::write(&p, trap).unwrap();
        let e = run_inner(&p, &[], &[], &at_root(d.path()), None).unwrap_err();
        assert!(format!("{e:?}").contains("unreachable"), "{e:?}");

        let ok = wat_module(r#"(module (memory (export "memory") 1) (func (export "_start")))"#);
        let p = d.path().join("ok.wasm");
        std::fs::write(&p, ok).unwrap();
        assert_eq!(
            run_inner(&p, &[], &[], &at_root(d.path()), None).unwrap(),
            0
        );
    }

    /// A module that never returns is stopped at its deadline, naming the knob.
    #[test]
    fn deadline_stops_a_looping_program() {
        let d = tempfile::tempdir().unwrap();
        let spin = wat_module(
            r#"(module (memory (export "memory") 1)
                 (func (export "_start") (loop $l (br $l))))"#,
        );
        let p = d.path().join("spin.wasm");
        std::fs::write(&p, spin).unwrap();
        let env = [(DEADLINE_ENV.to_string(), "0.3".to_string())];
        let t = std::time::Instant::now();
        let e = run_inner(&p, &[], &env, &at_root(d.path()), None).unwrap_err();
        assert!(t.elapsed() >= std::time::Duration::from_millis(300));
        let msg = format!("{e:?}");
        assert!(
            msg.contains("ran longer than its deadline of 300ms (SPIN_SHIM_WASI_TIMEOUT)"),
            "{msg}"
        );
        let bad = [(DEADLINE_ENV.to_string(), "soon".to_string())];
        let e = run_inner(&p, &[], &bad, &at_root(d.path()), None).unwrap_err();
        assert!(
            format!("{e:?}").contains("SPIN_SHIM_WASI_TIMEOUT=`soon`"),
            "{e:?}"
        );
    }

    /// `dir` preopened as the guest's `/`.
    fn at_root(dir: &Path) -> Vec<(PathBuf, String)> {
        vec![(dir.to_path_buf(), "/".to_string())]
    }

    fn wat_module(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }
}
