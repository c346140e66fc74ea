#!/usr/bin/env bash
# make test-kind: the seed scenario on a kind cluster (needs docker, kind, kubectl; not
# available on the project's build machines). Builds the shim and the sample, creates the
# cluster from deployments/kind/cluster.yaml, installs the shim on every node with the
# node-installer DaemonSet, installs metrics-server, deploys the RuntimeClass and the sample
# (Deployment + Service + HPA), applies load, and asserts that `kubectl top pod` moves and
# the HPA scales above 1 replica.
# Env: KIND_CLUSTER (default spin-shim), KEEP_CLUSTER=1 keeps the cluster afterwards,
#      METRICS_SERVER_URL (default: the metrics-server v0.7.2 release manifest).
set -euo pipefail
source "$(dirname "$0")/../deployments/e2e/common.sh"

cluster="${KIND_CLUSTER:-spin-shim}"
metrics_url="${METRICS_SERVER_URL:-https://github.com/kubernetes-sigs/metrics-server/releases/download/v0.7.2/components.yaml}"
e2e_require docker kind kubectl cargo

e2e_build
e2e_images

if ! kind get clusters | grep -qx "$cluster"; then
    kind create cluster --name "$cluster" --config "$REPO/deployments/kind/cluster.yaml" --wait "${E2E_TIMEOUT}s"
fi
[ "${KEEP_CLUSTER:-0}" = 1 ] || e2e_on_exit kind delete cluster --name "$cluster"
kubectl config use-context "kind-$cluster"

kind load docker-image --name "$cluster" containerd-shim-spin-v2-node-installer:dev spin-cpu:dev

kubectl apply -f "$REPO/deployments/node-installer/daemonset.yaml"
kubectl -n spin-node-installer rollout status daemonset/containerd-shim-spin-v2-installer --timeout="${E2E_TIMEOUT}s"

# kind has no metrics-server; its kubelets serve self-signed certificates.
kubectl apply -f "$metrics_url"
kubectl -n kube-system patch deployment metrics-server --type=json \
    -p '[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--kubelet-insecure-tls"}]' || true
kubectl -n kube-system rollout status deployment/metrics-server --timeout="${E2E_TIMEOUT}s"

e2e_deploy_sample
e2e_assert_scaling
