# Shared steps of scripts/test-kind.sh and scripts/test-k3s.sh (sourced, bash): build the
# shim and the sample image, deploy the RuntimeClass and the sample, apply load, and assert
# that `kubectl top pod` moves and the HPA scales above one replica.
# Env: E2E_TIMEOUT (seconds per wait, default 300), LOAD_CLIENTS (default 4).

E2E_TIMEOUT="${E2E_TIMEOUT:-300}"
LOAD_CLIENTS="${LOAD_CLIENTS:-4}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Cleanup commands run at exit, last registered first (one EXIT trap for everything).
E2E_CLEANUPS=()
e2e_on_exit() { E2E_CLEANUPS+=("$*"); }
e2e_cleanup() {
    local i
    for ((i = ${#E2E_CLEANUPS[@]} - 1; i >= 0; i--)); do eval "${E2E_CLEANUPS[i]}" || true; done
}
trap e2e_cleanup EXIT

e2e_log() { echo "e2e: $*" >&2; }
e2e_die() { echo "e2e: FAIL: $*" >&2; exit 1; }

e2e_require() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null || e2e_die "$tool is not installed (this target is for machines that have it; see deployments/README.md)"
    done
}

# Builds the shim (release) and the guest app.
e2e_build() {
    (cd "$REPO" && cargo build --release -p containerd-shim-spin-v2)
    bash "$REPO/scripts/build-apps.sh"
}

# Builds the node-installer image and the spin-cpu image with docker.
e2e_images() {
    local ctx
    ctx="$(mktemp -d)"
    objcopy --strip-debug "$REPO/target/release/containerd-shim-spin-v2" "$ctx/containerd-shim-spin-v2"
    cp "$REPO/deployments/node-installer/install-node.sh" "$ctx/"
    docker build -f "$REPO/deployments/node-installer/Dockerfile" \
        -t containerd-shim-spin-v2-node-installer:dev "$ctx"
    rm -rf "$ctx"
    ctx="$(mktemp -d)"
    cp "$REPO/tests/apps/target/wasm32-wasip2/release/spin_cpu.wasm" "$ctx/"
    sed 's|^source = .*|source = "spin_cpu.wasm"|' "$REPO/tests/apps/spin-cpu/spin.toml" >"$ctx/spin.toml"
    docker build -f "$REPO/deployments/sample/Dockerfile" -t spin-cpu:dev "$ctx"
    rm -rf "$ctx"
}

# Waits until "$@" succeeds (bounded by E2E_TIMEOUT).
e2e_wait() {
    local what="$1"; shift
    local deadline=$((SECONDS + E2E_TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || e2e_die "timed out after ${E2E_TIMEOUT}s waiting for $what"
        sleep 5
    done
    e2e_log "ok: $what"
}

e2e_deploy_sample() {
    kubectl apply -f "$REPO/deployments/runtimeclass.yaml"
    kubectl apply -f "$REPO/deployments/sample/cpu-load.yaml"
    e2e_on_exit kubectl delete -f "$REPO/deployments/sample/cpu-load.yaml" --ignore-not-found --wait=false
    kubectl rollout status deployment/spin-cpu --timeout="${E2E_TIMEOUT}s"
}

# Millicores of the busiest spin-cpu pod per `kubectl top pod` (0 when none yet).
e2e_top_millicores() {
    kubectl top pod -l app=spin-cpu --no-headers 2>/dev/null |
        awk '{ v = $2; sub(/m$/, "", v); if (v + 0 > max) max = v + 0 } END { print max + 0 }'
}

e2e_top_moves() { [ "$(e2e_top_millicores)" -ge 50 ]; }
e2e_hpa_scaled() {
    local n
    n="$(kubectl get hpa spin-cpu -o jsonpath='{.status.currentReplicas}' 2>/dev/null)"
    [ "${n:-0}" -gt 1 ]
}

# Load from inside the cluster: clients that request fib(30) in a loop through the Service.
e2e_load_start() {
    kubectl delete pod spin-load --ignore-not-found --wait=true
    kubectl run spin-load --image=busybox:1.36 --restart=Never -- sh -c \
        "for i in \$(seq $LOAD_CLIENTS); do (while :; do wget -q -O /dev/null 'http://spin-cpu/load?n=30' || sleep 1; done) & done; wait"
}
e2e_load_stop() { kubectl delete pod spin-load --ignore-not-found --wait=false; }

# The assertions of the seed scenario.
e2e_assert_scaling() {
    e2e_load_start
    e2e_on_exit e2e_load_stop
    e2e_wait "kubectl top pod shows >= 50m CPU for spin-cpu" e2e_top_moves
    kubectl top pod -l app=spin-cpu
    e2e_wait "HPA spin-cpu scaled above 1 replica" e2e_hpa_scaled
    kubectl get hpa spin-cpu
    e2e_log "PASS: pod CPU visible to metrics-server and the HPA scaled"
}
