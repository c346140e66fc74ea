//! A small kubelet: the CRI calls kubelet makes to run one pod with one container,
//! over containerd's CRI socket (`runtime.v1`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerStats, ContainerStatsFilter,
    ContainerStatsRequest, ContainerStatusRequest, CreateContainerRequest, ImageSpec, KeyValue,
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListContainerStatsRequest,
    ListImagesRequest, Mount, NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata,
    PodSandboxStatusRequest, RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest,
    StartContainerRequest, StopContainerRequest, StopPodSandboxRequest, VersionRequest,
};
use tonic::transport::{Channel, Endpoint, Uri};

/// A connected CRI client (runtime and image services on one channel).
#[derive(Clone)]
pub struct Cri {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

/// The pod kubelet asks for: host network, the given handler and cgroup parent.
#[derive(Debug, Clone)]
pub struct PodSpec {
    /// Pod name (metadata).
    pub name: String,
    /// Pod uid (metadata); kubelet's pod cgroup is named after it.
    pub uid: String,
    /// Kubernetes namespace (metadata).
    pub namespace: String,
    /// `LinuxPodSandboxConfig.cgroup_parent`, as kubelet computes it.
    pub cgroup_parent: String,
    /// RuntimeClass handler: `spin`, `runc`, ...
    pub handler: String,
    /// Directory for container logs (kubelet's `/var/log/pods/<ns>_<name>_<uid>`).
    pub log_directory: PathBuf,
}

/// One container of the pod.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// Container name (metadata).
    pub name: String,
    /// Image reference, already present in containerd's `k8s.io` namespace.
    pub image: String,
    /// Command (entrypoint override).
    pub command: Vec<String>,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment variables.
    pub envs: Vec<(String, String)>,
    /// CPU shares and quota as kubelet derives them from requests/limits (0 = unset).
    pub cpu_shares: i64,
    /// CFS quota in microseconds per `cpu_period` (0 = unlimited).
    pub cpu_quota: i64,
    /// The pod's `shareProcessNamespace`: the container joins the sandbox's PID namespace.
    pub share_process_namespace: bool,
    /// CPUs the container may run on (`cpuset_cpus`, as kubelet's static CPU manager sets
    /// it, e.g. `"0"`); empty = unset.
    pub cpuset_cpus: String,
    /// Volumes as kubelet mounts them: (host path, container path), read-only (a secret or
    /// configMap volume).
    pub read_only_mounts: Vec<(PathBuf, String)>,
}

impl Cri {
    /// Connects to the CRI socket at `socket`, retrying until it answers `Version` or
    /// `timeout` passes.
    pub async fn connect(socket: &Path, timeout: Duration) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        loop {
            let attempt = Self::try_connect(socket).await;
            match attempt {
                Ok(mut cri) => match cri
                    .runtime
                    .version(VersionRequest {
                        version: "v1".into(),
                    })
                    .await
                {
                    Ok(_) => return Ok(cri),
                    Err(e) if Instant::now() >= deadline => {
                        bail!("CRI at {} does not answer Version: {e}", socket.display())
                    }
                    Err(_) => {}
                },
                Err(e) if Instant::now() >= deadline => {
                    return Err(e)
                        .with_context(|| format!("connecting to CRI socket {}", socket.display()))
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn try_connect(socket: &Path) -> Result<Self> {
        let path = socket.to_path_buf();
        // The URI is a placeholder: the connector always dials the Unix socket.
        let channel = Endpoint::try_from("http://[::]:50051")?
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await?;
        Ok(Cri {
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
        })
    }

    /// The image references CRI knows (containerd namespace `k8s.io`).
    pub async fn list_images(&mut self) -> Result<Vec<String>> {
        let resp = self
            .images
            .list_images(ListImagesRequest { filter: None })
            .await?
            .into_inner();
        Ok(resp.images.into_iter().flat_map(|i| i.repo_tags).collect())
    }

    /// RunPodSandbox with host network/PID-per-pod namespaces; returns the sandbox id.
    pub async fn run_pod(&mut self, pod: &PodSpec) -> Result<String> {
        std::fs::create_dir_all(&pod.log_directory)
            .with_context(|| format!("creating {}", pod.log_directory.display()))?;
        let config = sandbox_config(pod);
        let resp = self
            .runtime
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: pod.handler.clone(),
            })
            .await
            .with_context(|| format!("RunPodSandbox {} (handler {:?})", pod.name, pod.handler))?;
        Ok(resp.into_inner().pod_sandbox_id)
    }

    /// CreateContainer + StartContainer in sandbox `sandbox_id`; returns the container id.
    pub async fn start_container(
        &mut self,
        sandbox_id: &str,
        pod: &PodSpec,
        c: &ContainerSpec,
    ) -> Result<String> {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: c.name.clone(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: c.image.clone(),
                ..Default::default()
            }),
            command: c.command.clone(),
            args: c.args.clone(),
            envs: c
                .envs
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            log_path: format!("{}/0.log", c.name),
            mounts: c
                .read_only_mounts
                .iter()
                .map(|(host, container)| Mount {
                    container_path: container.clone(),
                    host_path: host.display().to_string(),
                    readonly: true,
                    ..Default::default()
                })
                .collect(),
            linux: Some(LinuxContainerConfig {
                resources: Some(LinuxContainerResources {
                    cpu_shares: c.cpu_shares,
                    cpu_quota: c.cpu_quota,
                    cpu_period: if c.cpu_quota > 0 { 100_000 } else { 0 },
                    cpuset_cpus: c.cpuset_cpus.clone(),
                    ..Default::default()
                }),
                // As kubelet sends it: the pod's network and IPC, and a PID namespace of
                // the container's own unless the pod shares one (CRI's default, POD, is
                // the sandbox's).
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Node as i32,
                        pid: if c.share_process_namespace {
                            NamespaceMode::Pod
                        } else {
                            NamespaceMode::Container
                        } as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            labels: HashMap::from([("io.kubernetes.container.name".into(), c.name.clone())]),
            ..Default::default()
        };
        let created = self
            .runtime
            .create_container(CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(config),
                sandbox_config: Some(sandbox_config(pod)),
            })
            .await
            .with_context(|| format!("CreateContainer {} (image {})", c.name, c.image))?
            .into_inner()
            .container_id;
        self.runtime
            .start_container(StartContainerRequest {
                container_id: created.clone(),
            })
            .await
            .with_context(|| format!("StartContainer {}", c.name))?;
        Ok(created)
    }

    /// The host pid of a container's init process (from the verbose status info).
    pub async fn container_pid(&mut self, container_id: &str) -> Result<u32> {
        let resp = self
            .runtime
            .container_status(ContainerStatusRequest {
                container_id: container_id.to_string(),
                verbose: true,
            })
            .await?
            .into_inner();
        pid_from_info(&resp.info)
            .with_context(|| format!("container {container_id} status has no pid"))
    }

    /// The host pid of the sandbox's pause process.
    pub async fn sandbox_pid(&mut self, sandbox_id: &str) -> Result<u32> {
        let resp = self
            .runtime
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                verbose: true,
            })
            .await?
            .into_inner();
        pid_from_info(&resp.info).with_context(|| format!("sandbox {sandbox_id} status has no pid"))
    }

    /// The container's state and exit details, for error messages.
    pub async fn container_state(&mut self, container_id: &str) -> Result<String> {
        let resp = self
            .runtime
            .container_status(ContainerStatusRequest {
                container_id: container_id.to_string(),
                verbose: false,
            })
            .await?
            .into_inner();
        let s = resp.status.context("no status")?;
        Ok(format!(
            "state={} exit_code={} reason={:?} message={:?}",
            s.state, s.exit_code, s.reason, s.message
        ))
    }

    /// CRI ContainerStats for one container.
    pub async fn container_stats(&mut self, container_id: &str) -> Result<ContainerStats> {
        self.runtime
            .container_stats(ContainerStatsRequest {
                container_id: container_id.to_string(),
            })
            .await
            .with_context(|| format!("ContainerStats {container_id}"))?
            .into_inner()
            .stats
            .context("ContainerStats returned no stats")
    }

    /// CRI ListContainerStats for the containers of one sandbox.
    pub async fn list_container_stats(&mut self, sandbox_id: &str) -> Result<Vec<ContainerStats>> {
        Ok(self
            .runtime
            .list_container_stats(ListContainerStatsRequest {
                filter: Some(ContainerStatsFilter {
                    pod_sandbox_id: sandbox_id.to_string(),
                    ..Default::default()
                }),
            })
            .await
            .context("ListContainerStats")?
            .into_inner()
            .stats)
    }

    /// StopContainer (with kubelet's grace period) + RemoveContainer.
    pub async fn remove_container(&mut self, container_id: &str, grace_secs: i64) -> Result<()> {
        self.runtime
            .stop_container(StopContainerRequest {
                container_id: container_id.to_string(),
                timeout: grace_secs,
            })
            .await
            .with_context(|| format!("StopContainer {container_id}"))?;
        self.runtime
            .remove_container(RemoveContainerRequest {
                container_id: container_id.to_string(),
            })
            .await
            .with_context(|| format!("RemoveContainer {container_id}"))?;
        Ok(())
    }

    /// StopPodSandbox + RemovePodSandbox.
    pub async fn remove_pod(&mut self, sandbox_id: &str) -> Result<()> {
        self.runtime
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: sandbox_id.to_string(),
            })
            .await
            .with_context(|| format!("StopPodSandbox {sandbox_id}"))?;
        self.runtime
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: sandbox_id.to_string(),
            })
            .await
            .with_context(|| format!("RemovePodSandbox {sandbox_id}"))?;
        Ok(())
    }
}

fn sandbox_config(pod: &PodSpec) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            attempt: 0,
        }),
        // kubelet sends no hostname for host-network pods (they share the node's UTS
        // namespace; runc refuses a hostname without a private one).
        hostname: String::new(),
        log_directory: pod.log_directory.display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: pod.cgroup_parent.clone(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Node as i32,
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        labels: HashMap::from([
            ("io.kubernetes.pod.name".into(), pod.name.clone()),
            ("io.kubernetes.pod.uid".into(), pod.uid.clone()),
            ("io.kubernetes.pod.namespace".into(), pod.namespace.clone()),
        ]),
        ..Default::default()
    }
}

/// containerd puts a JSON document under the `info` key of verbose statuses; its `pid`
/// field is the host pid of the task.
fn pid_from_info(info: &HashMap<String, String>) -> Option<u32> {
    let doc: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    let pid = doc.get("pid")?.as_u64()?;
    (pid > 0).then_some(pid as u32)
}

/// `usage_core_nano_seconds` of CRI stats, 0 when absent.
pub fn cpu_ns(stats: &ContainerStats) -> u64 {
    stats
        .cpu
        .as_ref()
        .and_then(|c| c.usage_core_nano_seconds.as_ref())
        .map(|v| v.value)
        .unwrap_or(0)
}

/// `working_set_bytes` of CRI stats, 0 when absent.
pub fn working_set(stats: &ContainerStats) -> u64 {
    stats
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes.as_ref())
        .map(|v| v.value)
        .unwrap_or(0)
}

/// The runtime a test drives its CRI client on: two workers, as on the CI machines.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the test's tokio runtime")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_from_verbose_info() {
        let info = HashMap::from([(
            "info".to_string(),
            r#"{"pid": 4242, "sandboxID": "x"}"#.to_string(),
        )]);
        assert_eq!(pid_from_info(&info), Some(4242));
        let exited = HashMap::from([("info".to_string(), r#"{"pid": 0}"#.to_string())]);
        assert_eq!(pid_from_info(&exited), None);
        assert_eq!(pid_from_info(&HashMap::new()), None);
    }
}
