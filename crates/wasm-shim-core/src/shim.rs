//! The containerd `Shim` (the `start` and `delete` subcommands and the server's wiring).

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use containerd_shim::asynchronous::{spawn, ExitSignal, Shim};
use containerd_shim::protos::api::DeleteResponse;
use containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim::protos::protobuf::MessageField;
use containerd_shim::publisher::RemotePublisher;
use containerd_shim::{Config, Error, Flags, StartOpts};

use crate::service::Service;
use crate::state::{self, Persisted};
use crate::zygote;

/// Annotation CRI puts on every container of a pod: one shim serves the pod.
pub const SANDBOX_ID_ANNOTATION: &str = "io.kubernetes.cri.sandbox-id";

/// The zygote handle, set by `run_shim` in the server process before tokio starts.
pub(crate) static ZYGOTE: OnceLock<Arc<zygote::Client>> = OnceLock::new();

/// The shim.
pub struct WasmShim {
    namespace: String,
    id: String,
    exit: Arc<ExitSignal>,
}

/// The id whose shim serves this container: the pod's sandbox id from the bundle's
/// `config.json`, else the container's own id.
pub fn grouping(bundle: &Path, id: &str) -> String {
    let Ok(bytes) = std::fs::read(bundle.join("config.json")) else {
        return id.to_string();
    };
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| {
            v.get("annotations")?
                .get(SANDBOX_ID_ANNOTATION)?
                .as_str()
                .map(str::to_string)
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| id.to_string())
}

fn socket_served(address: &str) -> bool {
    let path = address.strip_prefix("unix://").unwrap_or(address);
    UnixStream::connect(path).is_ok()
}

#[async_trait]
impl Shim for WasmShim {
    type T = Service;

    async fn new(_runtime_id: &str, args: &Flags, _config: &mut Config) -> Self {
        if !args.address.is_empty() {
            let _ = crate::content::CONTAINERD_ADDRESS.set(args.address.clone());
        }
        WasmShim {
            namespace: args.namespace.clone(),
            id: args.id.clone(),
            exit: Arc::new(ExitSignal::default()),
        }
    }

    async fn start_shim(&mut self, opts: StartOpts) -> Result<String, Error> {
        // Read the runtime options before `spawn`, which would take them for runc's.
        let mut stdin = Vec::new();
        std::io::stdin()
            .read_to_end(&mut stdin)
            .map_err(|e| Error::Other(format!("start: reading the runtime options: {e}")))?;
        let options = cgroup_placement::decode_start_stdin(&stdin)
            .map_err(|e| Error::InvalidArgument(format!("start: {e}")))?;
        let cwd = std::env::current_dir().map_err(|e| Error::Other(e.to_string()))?;
        let group = grouping(&cwd, &opts.id);
        let address = containerd_shim::socket_address(&opts.address, &opts.namespace, &group);
        let address = if socket_served(&address) {
            address
        } else {
            if let Some(cg) = &options.shim_cgroup {
                // The server process spawned next is born in this cgroup.
                join_shim_cgroup(cg)?;
            }
            spawn(opts, &group, Vec::new()).await?
        };
        containerd_shim::util::write_str_to_file("address", &address).await?;
        Ok(address)
    }

    async fn delete_shim(&mut self) -> Result<DeleteResponse, Error> {
        let bundle = std::env::current_dir().map_err(|e| Error::Other(e.to_string()))?;
        let mut pid = 0;
        match Persisted::load(&bundle) {
            Ok(Some(p)) => {
                pid = p.pid.unwrap_or_default();
                p.placement.kill_all();
                if let Err(e) = state::cleanup(&p, &bundle) {
                    tracing::warn!(id = %self.id, "delete: {e:#}");
                }
            }
            Ok(None) => {
                // Nothing saved (create never got far): remove a state root if any.
                let root = state::state_root(&bundle);
                let _ = crate::confined::remove_tree(&root);
            }
            Err(e) => tracing::warn!(id = %self.id, "delete: {e:#}"),
        }
        Ok(DeleteResponse {
            pid: pid as u32,
            exit_status: state::KILLED_EXIT_STATUS,
            exited_at: MessageField::some(Timestamp::now()),
            ..Default::default()
        })
    }

    async fn wait(&mut self) {
        self.exit.wait().await;
    }

    async fn create_task_service(&self, publisher: RemotePublisher) -> Self::T {
        let zygote = ZYGOTE
            .get()
            .expect("the container-creation helper is started before the server")
            .clone();
        Service::new(self.namespace.clone(), zygote, publisher, self.exit.clone()).await
    }
}

/// Moves the calling process into the cgroup a runc `shim_cgroup` option names (relative
/// to each hierarchy's root), as runc's shim does with its own process: `start` calls it
/// before spawning the server, which then starts in that cgroup.
fn join_shim_cgroup(path: &str) -> Result<(), Error> {
    containerd_shim::cgroup::add_task_to_cgroup(path, std::process::id())
        .map_err(|e| Error::Other(format!("runtime option shim_cgroup {path:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_sandbox_annotation() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(grouping(d.path(), "c1"), "c1");
        std::fs::write(
            d.path().join("config.json"),
            r#"{"annotations":{"io.kubernetes.cri.sandbox-id":"pod1"}}"#,
        )
        .unwrap();
        assert_eq!(grouping(d.path(), "c1"), "pod1");
        std::fs::write(d.path().join("config.json"), r#"{"annotations":{}}"#).unwrap();
        assert_eq!(grouping(d.path(), "c1"), "c1");
    }
}
