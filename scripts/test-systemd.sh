#!/usr/bin/env bash
# make test-systemd: pod placement and accounting on a real systemd node.
#
# Boots a throw-away node (systemd 252 as PID 1 on a pure cgroup v2 hierarchy) with
# systemd-nspawn from a volatile overlay of this machine's root file system
# (scripts/systemd-node/node.sh), starts a private containerd in it (Debian's 1.6, CRI with
# the `spin` runtime), imports a pause image and the spin-cpu app image, and runs
# `systemd-node-scenario` (crate tests/systemd, built on the CRI driver of tests/cri) inside:
#   - systemd driver: kubelet's pod slice as a transient slice unit; the container runs in the
#     delegated transient scope cri-containerd-<id>.scope below it; under load the pod slice's
#     cpu.stat usage_usec >= 90% of the scope's; `ctr task metrics` gives the v2 message with
#     PSI; after removal no scope unit and no cgroup remain;
#   - cgroupfs driver on the same node: placement follows /kubepods/burstable/pod<uid>/<id>.
# Then, with ctr: a native busybox in a systemd scope opening a node of a host block device is
# refused (EPERM, the shim's device filter on the scope), and allowed with `--device`.
# Everything the run creates (node, overlay, mounts, cgroups, nspawn state) is removed on exit,
# also after a failure, and the host is checked for leftovers.
#
# Needs: root, `make build apps` done (the Makefile target does it). Env:
#   SYSTEMD_NODE_HANDLER   RuntimeClass handler under test (default spin)
#   SYSTEMD_NODE_LOAD_SECS seconds of HTTP load (default 4)
#   SYSTEMD_NODE_KEEP_LOGS directory to copy the node's journal to (default target/systemd-node)
#   SYSTEMD_NODE_SCENARIO  the scenario binary (default target/release/systemd-node-scenario)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
t_start=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "test-systemd: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it boots a systemd-nspawn node): sudo make test-systemd"
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"

# --- tools -------------------------------------------------------------------------------
need=()
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

target="${CARGO_TARGET_DIR:-$repo/target}"
shim_dir="${SHIM_BIN_DIR:-$target/release}"
apps_dir="${GUEST_APPS_DIR:-$repo/tests/apps/target/wasm32-wasip2/release}"
handler="${SYSTEMD_NODE_HANDLER:-spin}"
load_secs="${SYSTEMD_NODE_LOAD_SECS:-4}"
logs_dir="${SYSTEMD_NODE_KEEP_LOGS:-$target/systemd-node}"

[ -x "$shim_dir/containerd-shim-spin-v2" ] || die "no $shim_dir/containerd-shim-spin-v2: run make build first (or set SHIM_BIN_DIR)"
[ -f "$apps_dir/spin_cpu.wasm" ] || die "no $apps_dir/spin_cpu.wasm: run make apps first (or set GUEST_APPS_DIR)"

# The node-side binaries (no-ops when make build already built them).
log "building systemd-node-scenario and oci-image-builder (release)"
# --workspace --bins, as make build: a -p build unifies features differently and would
# compile a second variant of the dependencies.
cargo build --release --quiet --workspace --bins || die "building the workspace binaries failed"
scenario="${SYSTEMD_NODE_SCENARIO:-$target/release/systemd-node-scenario}"
builder="$target/release/oci-image-builder"
# containerd 1.6's ctr drops the PSI fields of the v2 metrics message; 1.7's ctr shows them.
ctr17_dir="$(bash scripts/install-containerd-1.7.sh)" || die "scripts/install-containerd-1.7.sh failed"
ctr17="$ctr17_dir/ctr"
log "prerequisites (cargo, containerd 1.7's ctr) ready in $(elapsed "$t_start")s"
[ -x "$ctr17" ] || die "no ctr in $ctr17_dir (scripts/install-containerd-1.7.sh)"

# --- cleanup (also on failure) ---------------------------------------------------------------
work="$(mktemp -d /tmp/test-systemd.XXXXXX)"
# shellcheck source=systemd-node/node.sh
source "$repo/scripts/systemd-node/node.sh"
# Top-level cgroups, to find what a run might leave at the hierarchy roots.
top_cgroups() { find /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort || true; }
host_cgroups_before="$(top_cgroups)"
cleanup() {
    local rc=$? status
    trap - EXIT INT TERM
    if [ -n "$NODE_LEADER" ]; then
        mkdir -p "$logs_dir"
        node_sh journalctl --no-pager -o short-monotonic >"$logs_dir/node-journal.log" 2>&1 || true
        [ -n "$NODE_DIR" ] && cp "$NODE_DIR/console.log" "$logs_dir/node-console.log" 2>/dev/null
        if [ "$rc" != 0 ]; then
            log "node journal (node-containerd, last 40 lines; full journal in $logs_dir/node-journal.log):"
            node_sh journalctl --no-pager -u node-containerd | grep -v 'loading plugin' | tail -n 40 >&2 || true
        fi
    fi
    local t_down
    t_down=$(date +%s.%N)
    node_teardown || { log "teardown left something behind"; rc=1; }
    rm -rf "$work"
    # Nothing of the node may remain on the host.
    local left
    left="$(comm -13 <(echo "$host_cgroups_before") <(top_cgroups) | grep -E 'systemd-node|payload|supervisor' || true)"
    [ -z "$left" ] || { log "cgroups left on the host: $left"; rc=1; }
    if grep -q ' /tmp/systemd-node\.' /proc/self/mountinfo; then log "mounts left on the host"; rc=1; fi
    status=$([ "$rc" = 0 ] && echo PASS || echo FAIL)
    log "teardown $(elapsed "$t_down")s; total $(elapsed "$t_start")s: $status"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- images ------------------------------------------------------------------------------
t=$(date +%s.%N)
# pause (static C program), busybox and wasi-hello archives, as the integration tests build them.
GUEST_APPS_DIR="$apps_dir" "$target/release/test-images" "$work" >/dev/null \
    || die "building the test images (test-images) failed"
"$builder" spin-container --name localhost/spin-cpu:test --app "$repo/tests/apps/spin-cpu" -o "$work/spin-cpu.tar" >/dev/null \
    || die "building the spin-cpu image failed"
log "images built in $(elapsed "$t")s"

# --- node --------------------------------------------------------------------------------
t=$(date +%s.%N)
export NODE_SHIM_DIR="$shim_dir"
# Trees outside the root file system are not in the overlay, and the node's /tmp is its
# own tmpfs (a CARGO_TARGET_DIR under /tmp would be missing there): bind both read-only.
binds=""
for p in "$repo" "$target" "$shim_dir" "$apps_dir" "$ctr17_dir"; do
    p="$(realpath "$p")"
    case "$p" in /tmp/*) binds="$binds $p"; continue ;; esac
    [ "$(stat -c %d "$p")" = "$(stat -c %d /)" ] || binds="$binds $p"
done
export NODE_BIND_RO="$binds"
node_boot || die "the systemd node did not come up"
log "node booted and containerd up in $(elapsed "$t")s"
cp "$work/pause.tar" "$work/spin-cpu.tar" "$NODE_DIR/root/var/tmp/"
node_ctr -n k8s.io image import /var/tmp/pause.tar >/dev/null || die "importing the pause image into the node"
node_ctr -n k8s.io image import /var/tmp/spin-cpu.tar >/dev/null || die "importing the spin-cpu image into the node"

# --- scenario ----------------------------------------------------------------------------
t=$(date +%s.%N)
log "running the pod scenarios in the node (handler $handler)"
node_run "$scenario" --socket "$NODE_CONTAINERD_SOCK" --ctr "$ctr17" --handler "$handler" \
    --image localhost/spin-cpu:test --command / --load-secs "$load_secs" \
    || die "scenario failed (handler $handler)"
log "scenarios passed in $(elapsed "$t")s"

# --- device rules ------------------------------------------------------------------------
# A native busybox (CAP_MKNOD, containerd's default device rules) in a transient systemd scope
# (systemd driver: cgroupsPath slice:prefix:name) makes a node for a host block device and
# opens it: the open is refused (EPERM) by the device filter the shim
# attached to the scope. With the disk allowed by the spec (ctr --device) the same read
# passes: nothing else (nspawn, the node's systemd) refuses it.
t=$(date +%s.%N)
cp "$work/busybox.tar" "$NODE_DIR/root/var/tmp/"
node_ctr image import /var/tmp/busybox.tar >/dev/null || die "importing the busybox image into the node"
# The first block device of the host that root can open here (the disk holding / is refused
# to root on these VMs themselves, so it would prove nothing).
disk_major="" disk_minor=""
for d in /sys/dev/block/*; do
    name="$(sed -n 's/^DEVNAME=//p' "$d/uevent")"
    [ -n "$name" ] && ( exec 3<"/dev/$name" ) 2>/dev/null || continue
    IFS=: read -r disk_major disk_minor <<<"${d##*/}"
    break
done
[ -n "$disk_major" ] || die "no block device of the host can be opened by root"
disk_script="/bin/busybox cat /proc/self/cgroup; /bin/busybox mknod /dev/hostdisk b $disk_major $disk_minor; echo mknod=\$?; /bin/busybox head -c1 /dev/hostdisk >/dev/null; echo open=\$?"
dev_id="devices-$$"
# The container's own command does the test (the shim has no exec); its /proc/self/cgroup
# shows that it ran in the transient scope.
dev_out="$(node_ctr run --rm --runtime io.containerd.spin.v2 --cgroup "system.slice:devtest:$dev_id" \
    docker.io/library/busybox:test "$dev_id" /bin/sh -c "$disk_script" 2>&1 || true)"
log "device rules, systemd scope, $disk_major:$disk_minor: $(echo "$dev_out" | tr '\n' ' ')"
grep -q "/system.slice/devtest-$dev_id.scope" <<<"$dev_out" || die "the container did not run in devtest-$dev_id.scope: $dev_out"
grep -q '^mknod=0$' <<<"$dev_out" || die "mknod of $disk_major:$disk_minor failed in the scope: $dev_out"
{ grep -q 'hostdisk: Operation not permitted' <<<"$dev_out" && grep -q '^open=1$' <<<"$dev_out"; } \
    || die "opening the host's disk was not refused in the systemd scope: $dev_out"
node_sh mknod /dev/hostdisk-allowed b "$disk_major" "$disk_minor" || die "mknod in the node"
dev_id="devices-allowed-$$"
dev_out="$(node_ctr run --rm --runtime io.containerd.spin.v2 --cgroup "system.slice:devtest:$dev_id" \
    --device /dev/hostdisk-allowed docker.io/library/busybox:test "$dev_id" \
    /bin/sh -c '/bin/busybox head -c1 /dev/hostdisk-allowed >/dev/null; echo open=$?' 2>&1 || true)"
node_sh rm -f /dev/hostdisk-allowed
grep -q '^open=0$' <<<"$dev_out" || die "reading the disk allowed by --device failed in the scope: $dev_out"
log "device rules: open refused in the scope, allowed with --device ($(elapsed "$t")s)"

# --- doctor ------------------------------------------------------------------------------
# On this node (systemd PID 1, pure cgroup v2, the runtime registered) every check must have
# the verdict the node's facts call for: the cgroups verdict follows the controllers the
# node's root offers (on a hybrid host's unified hierarchy memory is held by v1: fail).
controllers="$(node_sh cat /sys/fs/cgroup/cgroup.controllers)"
rc=0
report="$(node_run "$shim_dir/containerd-shim-spin-v2" doctor --json --config /etc/systemd-node/containerd.toml)" || rc=$?
python3 - "$report" "$rc" "$controllers" <<'PY' || die "doctor's verdicts on the systemd node are wrong: $report"
import json, sys
report, rc, ctl = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
r = {c["check"]: c for c in report["checks"]}
cg = "fail" if "memory" not in ctl else ("ok" if "cpu" in ctl else "warn")
want = {"systemd": ("ok", "systemd 2"), "cgroups": (cg, "cgroup v2"), "runtime": ("ok", "handler `"),
        "shim": ("ok", "containerd-shim-spin-v2"), "containerd": ("ok", "running as pid"),
        "devices": ("ok", "device filters load")}
bad = [f"{k}: {r.get(k)}" for k, (v, d) in want.items() if k not in r or r[k]["verdict"] != v or d not in r[k]["detail"]]
if rc != (1 if cg == "fail" else 0):
    bad.append(f"exit code {rc} with cgroups verdict {cg}")
sys.exit("\n".join(bad) if bad else 0)
PY
log "doctor: verdicts right on the systemd node (controllers: $controllers)"
# doctor --run: a test pod through the node's CRI socket (systemd driver: no kubelet here,
# systemd is PID 1), pod and container CPU compared as kubelet compares them; the pod's
# slice and the probe image are gone afterwards.
report="$(node_run "$shim_dir/containerd-shim-spin-v2" doctor --run --json --config /etc/systemd-node/containerd.toml)" || true
run_line="$(python3 - "$report" <<'PY'
import json, sys
r = {c["check"]: c for c in json.loads(sys.argv[1])["checks"]}
run = r.get("run") or {"verdict": "missing", "detail": ""}
print(run["verdict"], run["detail"])
sys.exit(0 if run["verdict"] == "ok" and "systemd driver" in run["detail"] else 1)
PY
)" || die "doctor --run on the systemd node: $run_line"
left="$(node_sh systemctl list-units --all --plain --no-legend 'kubepods-besteffort-pod*' || true)"
[ -z "$left" ] || die "doctor --run left the pod slice: $left"
node_sh ctr --address "$NODE_CONTAINERD_SOCK" -n k8s.io images ls -q | grep -q spin-shim-doctor-probe && die "doctor --run left its probe image"
log "doctor --run: $run_line"
