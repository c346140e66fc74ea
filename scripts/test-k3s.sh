#!/usr/bin/env bash
# make test-k3s: the seed scenario on K3s (not available on the project's build machines).
#   K3S_MODE=k3d  (default when k3d is installed) a k3d cluster whose node image has the shim
#                 and the spin runtime baked in (deployments/k3d/), since k3d nodes run k3s as
#                 PID 1 and cannot be restarted by the DaemonSet;
#   K3S_MODE=host an existing K3s on this machine (systemd, kubectl pointing at it): the
#                 node-installer DaemonSet installs the shim through config.toml.tmpl and
#                 restarts k3s.
# Both then deploy the RuntimeClass and the sample (Deployment + Service + HPA; K3s ships
# metrics-server), apply load and assert that `kubectl top pod` moves and the HPA scales.
# Env: K3D_CLUSTER (default spin-shim), K3S_TAG (k3d node base, default v1.30.4-k3s1),
#      K3D_STATIC_SHIM (statically linked shim for the glibc-less k3s image; default
#      make release's target/x86_64-unknown-linux-musl/release/containerd-shim-spin-v2, else
#      make build-static's target/static/x86_64-unknown-linux-musl/static-check/containerd-shim-spin-v2),
#      KEEP_CLUSTER=1 keeps the k3d cluster.
set -euo pipefail
source "$(dirname "$0")/../deployments/e2e/common.sh"

mode="${K3S_MODE:-$(command -v k3d >/dev/null && echo k3d || echo host)}"
e2e_require docker kubectl cargo
e2e_build
e2e_images

case "$mode" in
    k3d)
        e2e_require k3d
        cluster="${K3D_CLUSTER:-spin-shim}"
        # k3s node images have no glibc: they need a statically linked shim.
        static_shim="${K3D_STATIC_SHIM:-}"
        if [ -z "$static_shim" ]; then
            static_shim="$REPO/target/x86_64-unknown-linux-musl/release/containerd-shim-spin-v2"
            [ -x "$static_shim" ] || static_shim="$REPO/target/static/x86_64-unknown-linux-musl/static-check/containerd-shim-spin-v2"
        fi
        [ -x "$static_shim" ] || e2e_die "k3d nodes need a static shim at $static_shim (fix: build one for x86_64-unknown-linux-musl with a static libseccomp, or set K3D_STATIC_SHIM; or use K3S_MODE=host)"
        ctx="$(mktemp -d)"
        e2e_on_exit rm -rf "$ctx"
        objcopy --strip-debug "$static_shim" "$ctx/containerd-shim-spin-v2"
        cp "$REPO/deployments/k3d/config.toml.tmpl" "$ctx/"
        docker build -f "$REPO/deployments/k3d/Dockerfile" --build-arg "K3S_TAG=${K3S_TAG:-v1.30.4-k3s1}" \
            -t k3s-spin:dev "$ctx"
        if ! k3d cluster list "$cluster" >/dev/null 2>&1; then
            k3d cluster create "$cluster" --image k3s-spin:dev --agents 1 --wait
        fi
        [ "${KEEP_CLUSTER:-0}" = 1 ] || e2e_on_exit k3d cluster delete "$cluster"
        k3d image import --cluster "$cluster" spin-cpu:dev
        ;;
    host)
        e2e_require k3s
        # The installer image must reach the node's containerd (K3s's own, not docker's).
        docker save containerd-shim-spin-v2-node-installer:dev spin-cpu:dev | k3s ctr -n k8s.io images import -
        kubectl apply -f "$REPO/deployments/node-installer/daemonset.yaml"
        kubectl -n spin-node-installer rollout status daemonset/containerd-shim-spin-v2-installer --timeout="${E2E_TIMEOUT}s"
        ;;
    *) e2e_die "K3S_MODE must be k3d or host, not $mode" ;;
esac

e2e_wait "metrics-server answers" kubectl top node
e2e_deploy_sample
e2e_assert_scaling
