#!/usr/bin/env bash
# A throw-away systemd node: systemd (PID 1) on a cgroup v2 hierarchy, booted with
# systemd-nspawn from a volatile overlay of the host's root file system, so the host's
# containerd, runc, systemd and the shim built in the work tree are all visible inside.
#
# Source this file, then:
#   node_boot            boot the node, start its containerd (sets NODE_* variables)
#   node_sh CMD...       run a client command (systemctl, ctr, cat...) in the node's namespaces
#   node_run CMD...      run CMD inside the node as a transient systemd service (its own cgroup
#                        in the node's tree), stdin/stdout/stderr piped, exit status passed on,
#                        stopped after NODE_RUN_MAX_SECS (default 600)
#   node_teardown        stop the node and remove everything it made (safe to call twice)
#
# Inputs (environment): NODE_SHIM_DIR (directory holding containerd-shim-spin-v2, put first on
# containerd's PATH), NODE_BIND_RO (space-separated host paths to bind read-only at the same
# path, for trees not on the root file system), NODE_BOOT_TIMEOUT (seconds, default 90),
# NODE_CONTAINERD_CONFIG (the node's containerd config, default containerd.toml here),
# NODE_CONTAINERD_BIN (the containerd binary, default /usr/bin/containerd, Debian's 1.6).
#
# Facts this relies on (checked on Debian 12, systemd 252, hybrid-cgroup host without systemd):
# - SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 gives the node a pure cgroup v2 tree (the host's unified
#   hierarchy, in a cgroup namespace rooted at nspawn's "payload" cgroup).
# - Without a host systemd (--register=no --keep-unit) nspawn puts payload/ and supervisor/
#   cgroups below its OWN cgroup: we start it in a cgroup we create and remove afterwards.
# - nspawn's seccomp filter denies keyctl(); runc joins a session keyring, so @keyring is allowed.
#   It also denies bpf() (EPERM), which a node's container runtime needs for cgroup v2 device
#   filters (runc's and the shim's): bpf is allowed too, as on a real node.
# - On a host without systemd nspawn leaves /run/systemd/nspawn/ on disk: removed at teardown.

NODE_SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NODE_PATH_INSIDE="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the node's private containerd listens (inside the node).
NODE_CONTAINERD_SOCK="/run/node-containerd/containerd.sock"
NODE_DIR=""
NODE_NSPAWN_PID=""
NODE_LEADER=""

node_log() { echo "systemd-node: $*" >&2; }

# The host's cgroup v2 mount and, on hybrid hosts, the name=systemd v1 mount (may be empty).
node_cgroup_roots() {
    if [ "$(stat -f -c %T /sys/fs/cgroup)" = "cgroup2fs" ]; then
        NODE_CG2_ROOT=/sys/fs/cgroup
        NODE_CGSD_ROOT=""
    else
        NODE_CG2_ROOT=/sys/fs/cgroup/unified
        if [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" != "cgroup2fs" ]; then
            node_log "no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified: a cgroup v2 node cannot boot here"
            return 1
        fi
        NODE_CGSD_ROOT=""
        if grep -q ' /sys/fs/cgroup/systemd cgroup .*name=systemd' /proc/self/mounts; then
            NODE_CGSD_ROOT=/sys/fs/cgroup/systemd
        fi
    fi
}

# Writes the files the node needs into the overlay's upper layer (they shadow the host's).
node_populate_upper() {
    local upper="$1" machine_id="$2" shim_dir="$3"
    mkdir -p "$upper/etc/systemd/system" "$upper/etc/systemd-node"
    echo "$machine_id" >"$upper/etc/machine-id"
    # Host services the node must not start (they would fight over ports or need real devices).
    local u
    for u in containerd.service postgresql.service getty@tty1.service console-getty.service \
        systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer man-db.timer \
        e2scrub_all.timer fstrim.timer dpkg-db-backup.timer; do
        ln -sf /dev/null "$upper/etc/systemd/system/$u"
    done
    cp "${NODE_CONTAINERD_CONFIG:-$NODE_SCRIPT_DIR/containerd.toml}" "$upper/etc/systemd-node/containerd.toml"
    sed -e "s#@PATH@#${shim_dir}:${NODE_PATH_INSIDE}#" \
        -e "s#@CONTAINERD@#${NODE_CONTAINERD_BIN:-/usr/bin/containerd}#" \
        "$NODE_SCRIPT_DIR/node-containerd.service" >"$upper/etc/systemd/system/node-containerd.service"
}

node_boot() {
    node_cgroup_roots || return 1
    command -v systemd-nspawn >/dev/null || { node_log "systemd-nspawn missing: apt-get install systemd-container"; return 1; }
    local shim_dir="${NODE_SHIM_DIR:?set NODE_SHIM_DIR to the directory holding containerd-shim-spin-v2}"
    local timeout="${NODE_BOOT_TIMEOUT:-90}"
    [ -d /run/systemd/nspawn ] && NODE_HAD_NSPAWN_RUN=1 || NODE_HAD_NSPAWN_RUN=0

    NODE_DIR="$(mktemp -d /tmp/systemd-node.XXXXXX)"
    local suffix="${NODE_DIR##*.}"
    NODE_NAME="snode-${suffix,,}"
    NODE_CGROUP="systemd-node-test-${suffix}"
    local machine_id
    machine_id="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

    # Volatile root: overlay of / with an upper layer on a tmpfs of our own.
    mkdir -p "$NODE_DIR/upperfs" "$NODE_DIR/root"
    mount -t tmpfs -o mode=0755,size=8g systemd-node "$NODE_DIR/upperfs" || return 1
    mkdir -p "$NODE_DIR/upperfs/upper" "$NODE_DIR/upperfs/work"
    mount -t overlay systemd-node-root \
        -o "lowerdir=/,upperdir=$NODE_DIR/upperfs/upper,workdir=$NODE_DIR/upperfs/work" \
        "$NODE_DIR/root" || return 1
    node_populate_upper "$NODE_DIR/upperfs/upper" "$machine_id" "$shim_dir"

    # nspawn's own cgroup: payload/ and supervisor/ are created below it.
    mkdir "$NODE_CG2_ROOT/$NODE_CGROUP" || return 1
    [ -n "$NODE_CGSD_ROOT" ] && { mkdir "$NODE_CGSD_ROOT/$NODE_CGROUP" || return 1; }

    # containerd's overlayfs snapshots cannot have their upper layer on the node's overlay
    # root (EINVAL): its root directory is a plain host directory, bound in.
    mkdir -p "$NODE_DIR/containerd-root"
    local binds=("--bind=$NODE_DIR/containerd-root:/var/lib/node-containerd") p
    for p in ${NODE_BIND_RO:-}; do binds+=("--bind-ro=$p"); done
    (
        echo "$BASHPID" >"$NODE_CG2_ROOT/$NODE_CGROUP/cgroup.procs"
        [ -n "$NODE_CGSD_ROOT" ] && echo "$BASHPID" >"$NODE_CGSD_ROOT/$NODE_CGROUP/cgroup.procs"
        SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 exec systemd-nspawn --quiet --register=no --keep-unit \
            --private-network --system-call-filter='@keyring bpf' --console=read-only \
            -D "$NODE_DIR/root" -M "$NODE_NAME" --uuid="$machine_id" "${binds[@]}" \
            --boot -- systemd.firstboot=no systemd.unit=basic.target
    ) >"$NODE_DIR/console.log" 2>&1 </dev/null &
    NODE_NSPAWN_PID=$!
    node_log "booting $NODE_NAME (nspawn pid $NODE_NSPAWN_PID, dir $NODE_DIR, host cgroup /$NODE_CGROUP)"

    local i state=""
    for ((i = 0; i < timeout * 5; i++)); do
        kill -0 "$NODE_NSPAWN_PID" 2>/dev/null || { node_log "systemd-nspawn exited during boot:"; tail -20 "$NODE_DIR/console.log" >&2; return 1; }
        [ -z "$NODE_LEADER" ] && NODE_LEADER="$(pgrep -P "$NODE_NSPAWN_PID" | head -1)"
        if [ -n "$NODE_LEADER" ]; then
            state="$(node_sh systemctl is-system-running 2>/dev/null || true)"
            case "$state" in running | degraded) break ;; esac
        fi
        sleep 0.2
    done
    case "$state" in
        running | degraded) ;;
        *) node_log "node did not finish booting in ${timeout}s (state '${state}'):"; tail -20 "$NODE_DIR/console.log" >&2; return 1 ;;
    esac
    [ "$(node_sh stat -f -c %T /sys/fs/cgroup)" = "cgroup2fs" ] || { node_log "the node's /sys/fs/cgroup is not cgroup v2"; return 1; }
    [ "$(node_sh readlink /proc/1/exe)" = "/usr/lib/systemd/systemd" ] || { node_log "PID 1 of the node is not systemd"; return 1; }
    node_sh systemctl start dbus.service node-containerd.service || {
        node_log "node services failed to start:"; node_sh journalctl --no-pager -n 30 -u node-containerd -u dbus >&2; return 1; }
    node_log "node up: systemd $(node_sh systemctl --version | head -1 | cut -d' ' -f2) as PID 1 ($state), containerd at $NODE_CONTAINERD_SOCK"
}

node_sh() {
    nsenter -t "$NODE_LEADER" -a env -i PATH="$NODE_PATH_INSIDE" HOME=/root LANG=C.UTF-8 "$@"
}

node_run() {
    node_sh systemd-run --quiet --wait --pipe --collect --service-type=exec \
        -p "RuntimeMaxSec=${NODE_RUN_MAX_SECS:-600}" -p "Environment=PATH=$NODE_PATH_INSIDE" -- "$@"
}

node_ctr() { node_sh ctr -a "$NODE_CONTAINERD_SOCK" "$@"; }

# Kills every process left in a cgroup v2 subtree (cgroup.kill) or v1 subtree (by pid).
node_kill_cgroup_tree() {
    local dir="$1" f pid
    [ -d "$dir" ] || return 0
    if [ -e "$dir/cgroup.kill" ]; then
        echo 1 >"$dir/cgroup.kill" 2>/dev/null || true
    else
        while IFS= read -r f; do
            while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$f"
        done < <(find "$dir" -name cgroup.procs)
    fi
}

node_remove_cgroup_tree() {
    local dir="$1" i
    [ -d "$dir" ] || return 0
    for ((i = 0; i < 50; i++)); do
        find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null
        [ -d "$dir" ] || return 0
        node_kill_cgroup_tree "$dir"
        sleep 0.1
    done
    node_log "could not remove cgroup $dir"
    return 1
}

node_teardown() {
    local rc=0 i
    if [ -n "$NODE_NSPAWN_PID" ] && kill -0 "$NODE_NSPAWN_PID" 2>/dev/null; then
        # SIGTERM makes nspawn ask the node's systemd for a clean poweroff.
        kill -TERM "$NODE_NSPAWN_PID" 2>/dev/null
        for ((i = 0; i < 150; i++)); do kill -0 "$NODE_NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$NODE_NSPAWN_PID" 2>/dev/null; then
            node_log "node did not power off in 30s: killing it"
            kill -KILL "$NODE_NSPAWN_PID" 2>/dev/null
        fi
        wait "$NODE_NSPAWN_PID" 2>/dev/null
    fi
    NODE_NSPAWN_PID=""
    NODE_LEADER=""
    if [ -n "${NODE_CGROUP:-}" ]; then
        node_kill_cgroup_tree "$NODE_CG2_ROOT/$NODE_CGROUP"
        node_remove_cgroup_tree "$NODE_CG2_ROOT/$NODE_CGROUP" || rc=1
        if [ -n "$NODE_CGSD_ROOT" ]; then
            node_kill_cgroup_tree "$NODE_CGSD_ROOT/$NODE_CGROUP"
            node_remove_cgroup_tree "$NODE_CGSD_ROOT/$NODE_CGROUP" || rc=1
        fi
    fi
    if [ -n "$NODE_DIR" ]; then
        local m
        for m in "$NODE_DIR/root" "$NODE_DIR/upperfs"; do
            if mountpoint -q "$m"; then
                umount "$m" 2>/dev/null || { sleep 1; umount "$m" 2>/dev/null; } || umount -l "$m" || rc=1
            fi
        done
        mountpoint -q "$NODE_DIR/root" || mountpoint -q "$NODE_DIR/upperfs" || rm -rf "$NODE_DIR"
        rm -rf "/run/systemd/nspawn/propagate/$NODE_NAME"
        if [ "${NODE_HAD_NSPAWN_RUN:-1}" = 0 ]; then rm -rf /run/systemd/nspawn; fi
    fi
    NODE_DIR=""
    NODE_CGROUP=""
    return $rc
}
