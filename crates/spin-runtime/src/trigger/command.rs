//! The command trigger, as the spin-trigger-command plugin defines it: `[[trigger.command]]
//! component` runs the component's `wasi:cli/run` once with argv = the component id and
//! the container's arguments, and the app exits with the guest's exit code (0 when `run`
//! returns ok, 1 when it returns an error, N for `exit(N)`), so Kubernetes Jobs see it.
//! As in the plugin, only the first command trigger runs (a warning names the others).

use std::sync::Arc;

use anyhow::anyhow;
use wasmtime_wasi::p2::bindings::CommandPre;

use crate::runtime::{LoadedApp, PreparedComponent};

/// The command trigger of an app, ready to run.
pub(crate) struct Command {
    trigger: String,
    component: Arc<PreparedComponent>,
    pre: CommandPre<crate::state::InstanceState>,
    args: Vec<String>,
}

/// The app's command trigger (the first one), with argv; fails naming the component when
/// it exports no `wasi:cli/run`.
pub(crate) fn prepare(app: &LoadedApp, args: &[String]) -> anyhow::Result<Option<Command>> {
    let triggers = &app.app.event_triggers.command;
    let Some(first) = triggers.first() else {
        return Ok(None);
    };
    if triggers.len() > 1 {
        tracing::warn!(
            "the app has {} command triggers: only the first (`{}`) runs, as in Spin",
            triggers.len(),
            first.id
        );
    }
    let id = &first.config.component;
    let component = app.component(id).ok_or_else(|| {
        anyhow!(
            "command trigger `{}`: component `{id}` is not loaded",
            first.id
        )
    })?;
    let pre = CommandPre::new(component.instance_pre.clone()).map_err(|e| {
        anyhow!(
            "command trigger `{}`: component `{id}` does not export wasi:cli/run@0.2.x: it must be \
             a WASI command (a Rust `fn main` built for wasm32-wasip2): {e:#}",
            first.id
        )
    })?;
    Ok(Some(Command {
        trigger: first.id.clone(),
        component,
        pre,
        args: std::iter::once(id.clone())
            .chain(args.iter().cloned())
            .collect(),
    }))
}

impl Command {
    /// Runs the command to its end; returns its exit code.
    pub(crate) async fn run(self, app: Arc<LoadedApp>) -> anyhow::Result<i32> {
        tracing::info!(trigger = %self.trigger, args = ?&self.args[1..], "running command");
        let mut store = app.new_store_with(&self.component, &self.args, true)?;
        let usage = store.data().limits.usage();
        let result = crate::metrics::cpu_timed(usage, async {
            let command = self.pre.instantiate_async(&mut store).await?;
            command.wasi_cli_run().call_run(&mut store).await
        })
        .await;
        let code = match result {
            Ok(Ok(())) => 0,
            Ok(Err(())) => 1,
            Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                Some(exit) => exit.0,
                None => {
                    tracing::error!(
                        trigger = %self.trigger,
                        component = %self.component.id,
                        "command failed: {e:#}"
                    );
                    1
                }
            },
        };
        tracing::info!(trigger = %self.trigger, code, "command exited");
        Ok(code)
    }
}
