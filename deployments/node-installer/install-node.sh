#!/bin/sh
# Installs containerd-shim-spin-v2 on a Kubernetes node and registers the `spin` runtime
# (runtime_type io.containerd.spin.v2) in containerd's CRI configuration.
#
# Handles plain containerd 1.6/1.7 (config version 2, plugin "io.containerd.grpc.v1.cri"),
# containerd 2.x (config version 3, plugin "io.containerd.cri.v1.runtime"), K3s and RKE2
# (config.toml.tmpl / config-v3.toml.tmpl next to the generated config.toml), MicroK8s
# (args/containerd-template.toml) and k0s (a drop-in in /etc/k0s/containerd.d/).
# It sets no cgroup option: the shim places containers under the pod cgroup by itself.
#
# Idempotent: the runtime sits in one marked block that a rerun replaces; nothing is changed
# and containerd is not restarted when shim and config are already current. Before the first
# change a file is backed up once as <file>.spin-backup. POSIX sh, so it runs in busybox.
#
# Safe on a live node: the edited config is checked with the node's own containerd
# (`containerd --config FILE config dump`) before it replaces the old one; when the restart
# fails, every file this run changed is put back as it was and containerd restarted again on
# it. A restart still owed (it failed, or the run was killed after a change) is remembered in
# /var/lib/containerd-shim-spin-v2/restart-pending on the node, so the next run restarts
# even though shim and config are then current.
#
# Usage: install-node.sh [options]
#   --host-root DIR   the node's root filesystem (default /, /host in the DaemonSet)
#   --shim FILE       the shim binary to install (default: next to this script)
#   --archive SRC     install the shim from a release archive
#                     (containerd-shim-spin-v2-<version>-linux-<arch>.tar.gz, `make release`):
#                     an http(s):// URL, fetched with curl or wget, or a file (e.g. mounted
#                     into the pod); its sha256 is checked before anything is installed;
#                     `{arch}` in SRC stands for the node's `uname -m` (x86_64, aarch64)
#   --sha256 SUM      the archive's expected sha256: 64 hex digits, or the URL or file of a
#                     sha256sum line (default: SRC.sha256, as `make release` writes beside it)
#   --distro NAME     auto|containerd|k3s|rke2|microk8s|k0s (default auto: detected)
#   --config FILE     containerd config to edit, relative to host root (plain containerd;
#                     default /etc/containerd/config.toml)
#   --bin-dir DIR     where the shim goes on the host (default /usr/local/bin)
#   --no-restart      do not restart containerd (the caller does)
# Environment: HOST_ROOT, SHIM_SOURCE, SHIM_ARCHIVE, SHIM_ARCHIVE_SHA256, NODE_DISTRO, CONTAINERD_CONFIG, SHIM_BIN_DIR, RESTART=none
#   RESTART_CMD  command that restarts the node's containerd (overrides the distro default)
#   HOST_NAMESPACES=here  run the restart without nsenter (the installer is not in a pod)
#   VERIFY_SHIM=0  skip running `containerd-shim-spin-v2 -v` on the node after the copy
#   CONTAINERD_MAJOR  1 or 2 when a config file does not exist yet and the containerd binary
#                     cannot be found to ask (decides the config layout to write)
#   CONTAINERD_BIN  a containerd binary to check the edited config with, run as it is here
#                   (default: the node's own, searched in the usual places and run through
#                   chroot); VALIDATE=require fails when none is found, VALIDATE=0 skips it
set -eu

host_root="${HOST_ROOT:-/}"
shim_src="${SHIM_SOURCE:-}"
archive="${SHIM_ARCHIVE:-}"
archive_sha="${SHIM_ARCHIVE_SHA256:-}"
distro="${NODE_DISTRO:-auto}"
config_rel="${CONTAINERD_CONFIG:-}"
bin_dir="${SHIM_BIN_DIR:-/usr/local/bin}"
restart="${RESTART:-auto}"

while [ $# -gt 0 ]; do
    case "$1" in
        --host-root) host_root="$2"; shift 2 ;;
        --shim) shim_src="$2"; shift 2 ;;
        --distro) distro="$2"; shift 2 ;;
        --config) config_rel="$2"; shift 2 ;;
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --no-restart) restart=none; shift ;;
        --archive) archive="$2"; shift 2 ;;
        --sha256) archive_sha="$2"; shift 2 ;;
        -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
        *) echo "install-node: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

log() { echo "install-node: $*" >&2; }
die() { echo "install-node: error: $*" >&2; exit 1; }

host_root="${host_root%/}"
h() { printf '%s%s' "$host_root" "$1"; }   # host path -> path as seen here

PENDING="/var/lib/containerd-shim-spin-v2/restart-pending"
BEGIN_MARK="# BEGIN containerd-shim-spin-v2 (managed by install-node.sh; a rerun replaces this block)"
END_MARK="# END containerd-shim-spin-v2"
changed=0
# Files this run replaced, each with the copy to restore: "<file>|<copy or ->" lines.
replaced=""
# Every config file this run manages, one a line.
managed=""

# --- the shim to install: a file, or a release archive checked against its sha256 ----------
# Copies URL or file $1 to file $2.
fetch() {
    case "$1" in
        http://* | https://*)
            if command -v curl >/dev/null 2>&1; then
                curl -fsSL --retry 3 -o "$2" "$1"
            elif command -v wget >/dev/null 2>&1; then
                wget -q -O "$2" "$1"
            else
                die "neither curl nor wget is here to fetch $1 (fix: mount the archive into the pod and pass its path to --archive)"
            fi ;;
        file://*) cp "${1#file://}" "$2" ;;
        *) cp "$1" "$2" ;;
    esac
}
if [ -n "$archive" ]; then
    [ -z "$shim_src" ] || die "both --shim ($shim_src) and --archive ($archive) given (fix: pass one of them)"
    # `{arch}` in the source names this node's architecture (one DaemonSet for a mixed fleet).
    node_arch="$(uname -m)"
    archive="$(printf '%s' "$archive" | sed "s/{arch}/$node_arch/g")"
    archive_sha="$(printf '%s' "$archive_sha" | sed "s/{arch}/$node_arch/g")"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    fetch "$archive" "$work/archive.tar.gz" ||
        die "cannot fetch the shim archive $archive (fix: check the URL, or that the file is mounted there)"
    want=""
    sum_src="$archive.sha256"
    if [ -n "$archive_sha" ]; then
        if printf '%s' "$archive_sha" | grep -Eq '^[0-9a-fA-F]{64}$'; then
            want="$archive_sha"
        else
            sum_src="$archive_sha"
        fi
    fi
    if [ -z "$want" ]; then
        fetch "$sum_src" "$work/archive.sha256" ||
            die "cannot fetch the checksum $sum_src of $archive (fix: publish the .sha256 beside the archive, or pass --sha256 with its 64 hex digits)"
        want="$(sed -n '1s/^\([0-9a-fA-F]\{64\}\)\([[:space:]].*\)\{0,1\}$/\1/p' "$work/archive.sha256")"
        [ -n "$want" ] || die "$sum_src does not start with a sha256 (64 hex digits) (fix: pass the .sha256 file that make release wrote, or --sha256 with the digits)"
    fi
    want="$(printf '%s' "$want" | tr 'A-F' 'a-f')"
    got="$(sha256sum "$work/archive.tar.gz" | cut -d' ' -f1)"
    [ "$got" = "$want" ] ||
        die "the shim archive $archive has sha256 $got but $want was expected: refused, nothing installed (fix: fetch the archive again, or give the checksum published with this archive)"
    log "shim archive $archive: sha256 $got verified"
    # The archive's architecture, from its name, must be this node's.
    name="$(basename "$archive")"
    case "$name" in
        containerd-shim-spin-v2-*-linux-*.tar.gz)
            arch="${name##*-linux-}"
            arch="${arch%.tar.gz}"
            [ "$arch" = "$node_arch" ] ||
                die "the shim archive $name is for $arch but this node is $node_arch (fix: use the ...-linux-$node_arch.tar.gz archive)" ;;
    esac
    mkdir "$work/x"
    tar -xzf "$work/archive.tar.gz" -C "$work/x" || die "cannot unpack $archive as a tar.gz"
    shim_src="$(find "$work/x" -type f -name containerd-shim-spin-v2 | head -n 1)"
    [ -n "$shim_src" ] || die "the shim archive $archive holds no containerd-shim-spin-v2 (fix: use an archive that make release wrote)"
fi
[ -n "$shim_src" ] || shim_src="$(dirname "$0")/containerd-shim-spin-v2"
[ -f "$shim_src" ] || die "shim binary $shim_src not found (fix: pass --shim FILE, --archive URL|FILE, or set SHIM_SOURCE)"

# --- which node flavour -------------------------------------------------------------------
if [ "$distro" = auto ]; then
    if [ -d "$(h /var/lib/rancher/k3s/agent/etc/containerd)" ]; then distro=k3s
    elif [ -d "$(h /var/lib/rancher/rke2/agent/etc/containerd)" ]; then distro=rke2
    elif [ -d "$(h /var/snap/microk8s/current/args)" ]; then distro=microk8s
    elif [ -d "$(h /etc/k0s)" ] || [ -d "$(h /var/lib/k0s)" ]; then distro=k0s
    else distro=containerd
    fi
fi
log "node flavour: $distro"

# A change of an earlier run whose containerd restart never succeeded still needs one.
owe_restart() {
    [ "$restart" = none ] && return
    mkdir -p "$(dirname "$(h "$PENDING")")"
    : >"$(h "$PENDING")"
}
if [ "$restart" != none ] && [ -e "$(h "$PENDING")" ]; then
    log "an earlier run changed the node but its containerd restart did not succeed ($PENDING): restarting this time"
    changed=1
fi

# --- the shim binary ----------------------------------------------------------------------
install_shim() { # $1: host directory
    dir="$(h "$1")"
    mkdir -p "$dir"
    if [ -f "$dir/containerd-shim-spin-v2" ] && cmp -s "$shim_src" "$dir/containerd-shim-spin-v2"; then
        log "shim already current in $1"
        return
    fi
    owe_restart
    # Copy then rename: running shims keep their (old) executable.
    cp "$shim_src" "$dir/.containerd-shim-spin-v2.new"
    chmod 0755 "$dir/.containerd-shim-spin-v2.new"
    mv -f "$dir/.containerd-shim-spin-v2.new" "$dir/containerd-shim-spin-v2"
    log "installed shim in $1"
    changed=1
}
install_shim "$bin_dir"
# k0s runs containerd with its own bin directory on PATH.
[ "$distro" = k0s ] && install_shim /var/lib/k0s/bin
shim_path="$bin_dir/containerd-shim-spin-v2"

# A shim from `make build` links glibc and libseccomp dynamically (a release archive's is
# static and needs nothing): make sure it runs on this node.
if [ "${VERIFY_SHIM:-1}" = 1 ]; then
    if [ -z "$host_root" ]; then
        out="$("$shim_path" -v 2>&1)" || ok=no
    else
        out="$(chroot "$host_root" "$shim_path" -v 2>&1)" || ok=no
    fi
    [ "${ok:-yes}" = yes ] || die "the installed shim does not run on this node: $out (fix: install libseccomp2 on the node, or build the shim against the node's glibc)"
    log "shim runs on the node: $out"
fi

# --- config layout ------------------------------------------------------------------------
# Prints the config `version` of file $1 (0 when it has none).
config_version() {
    v="$(sed -n 's/^[[:space:]]*version[[:space:]]*=[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$1" 2>/dev/null | head -n 1)"
    echo "${v:-0}"
}

# Major version of the node's containerd, from its binary (empty when unknown).
containerd_major() {
    if [ -n "${CONTAINERD_MAJOR:-}" ]; then echo "$CONTAINERD_MAJOR"; return; fi
    for b in /usr/bin/containerd /usr/local/bin/containerd /bin/containerd /var/lib/k0s/bin/containerd; do
        if [ -x "$(h "$b")" ]; then
            out="$( (chroot "$host_root" "$b" --version || "$(h "$b")" --version) 2>/dev/null || true)"
            # "containerd github.com/containerd/containerd/v2 v2.0.0 <sha>" or "... 1.7.24 ..."
            echo "$out" | sed -n 's/^containerd [^ ]* v\{0,1\}\([0-9]\)\..*/\1/p' | head -n 1
            return
        fi
    done
}

# The node's containerd binary as a host path (empty when none is found).
node_containerd() {
    for b in /usr/bin/containerd /usr/local/bin/containerd /bin/containerd /var/lib/k0s/bin/containerd \
        /var/lib/rancher/k3s/data/current/bin/containerd /var/lib/rancher/rke2/bin/containerd \
        /snap/microk8s/current/bin/containerd; do
        if [ -x "$(h "$b")" ]; then echo "$b"; return; fi
    done
}

# Runs the node's containerd binary $1 (host path) with the remaining arguments.
run_node_containerd() {
    b="$1"
    shift
    if [ -z "$host_root" ]; then
        "$b" "$@"
    else
        chroot "$host_root" "$b" "$@"
    fi
}

# Checks that the node's containerd loads config file $1 (path as seen here, below the host
# root). $2 names the file in messages. Dies (leaving the old file in place) when it does not.
validate_config() {
    [ "${VALIDATE:-1}" = 0 ] && return
    if [ -n "${CONTAINERD_BIN:-}" ]; then
        b="$CONTAINERD_BIN"
        out="$("$b" --config "$1" config dump 2>&1 >/dev/null)" && ok=yes || ok=no
    else
        b="$(node_containerd)"
        ok=unknown
    fi
    if [ -z "$b" ]; then
        [ "${VALIDATE:-1}" = require ] && die "no containerd binary found on the node to check $2 (fix: set CONTAINERD_BIN)"
        log "no containerd binary found on the node: $2 not checked before use (set CONTAINERD_BIN to check it)"
        return
    fi
    if [ "$ok" = unknown ]; then
        case "$1" in
            "$host_root"/*) inside="${1#"$host_root"}" ;;
            *) inside="$1" ;;
        esac
        out="$(run_node_containerd "$b" --config "$inside" config dump 2>&1 >/dev/null)" && ok=yes || ok=no
    fi
    if [ "$ok" = no ]; then
        rm -f "$1"
        die "the node's containerd ($b) rejects $2 with the spin runtime added, so it was left unchanged: $out (fix: repair $2 until \`$b --config $2 config dump\` accepts it, then rerun)"
    fi
    log "checked with the node's containerd ($b): it loads $2"
}

# The runtime table for a config of version $1.
runtime_block() {
    case "$1" in
        3) table='plugins."io.containerd.cri.v1.runtime".containerd.runtimes.spin' ;;
        2) table='plugins."io.containerd.grpc.v1.cri".containerd.runtimes.spin' ;;
        1) table='plugins.cri.containerd.runtimes.spin' ;;
        *) die "unsupported containerd config version $1" ;;
    esac
    printf '%s\n[%s]\n  runtime_type = "io.containerd.spin.v2"\n  runtime_path = "%s"\n%s\n' \
        "$BEGIN_MARK" "$table" "$shim_path" "$END_MARK"
}

# Whether TOML file $1 defines a `spin` runtime: a [..runtimes.spin] table, or dotted keys
# below a runtimes table (`runtimes.spin.runtime_type = ..` or `spin.runtime_type = ..`).
defines_spin_runtime() {
    awk '
        /^[[:space:]]*\[/ {
            t = $0
            sub(/^[[:space:]]*\[+[[:space:]]*/, "", t)
            sub(/[[:space:]]*\].*$/, "", t)
            gsub(/[[:space:]]*\.[[:space:]]*/, ".", t)
            if (t ~ /(^|\.)runtimes\.("spin"|spin|\047spin\047)$/) found = 1
            next
        }
        /^[[:space:]]*[^#=[:space:]][^=]*=/ {
            k = $0
            sub(/=.*/, "", k)
            gsub(/[[:space:]]/, "", k)
            full = (t == "" ? k : t "." k)
            if (full ~ /(^|\.)runtimes\.("spin"|spin|\047spin\047)\./) found = 1
        }
        END { exit !found }' "$1"
}

# Adds (or refreshes) the managed block in config file $1 (path as seen here). $2: the
# config version to write when the file does not exist or is empty ("detect": ask the
# node's containerd binary).
ensure_runtime() {
    file="$1"
    fresh_version="$2"
    managed="$managed$file
"
    mkdir -p "$(dirname "$file")"
    if [ -s "$file" ]; then
        version="$(config_version "$file")"
        # An unversioned, non-empty config is version 1 (short plugin names).
        [ "$version" = 0 ] && version=1
        header=""
    else
        version="$fresh_version"
        [ "$version" = detect ] && version="$(fresh_config_version)"
        header="version = $version"
    fi
    tmp="$file.spin-new.$$"
    # The file without our block (from a previous run).
    if [ -f "$file" ]; then
        awk -v b="$BEGIN_MARK" -v e="$END_MARK" '
            $0 == b { skip = 1; next }
            $0 == e { skip = 0; next }
            !skip { print }' "$file" >"$tmp"
    else
        : >"$tmp"
    fi
    if defines_spin_runtime "$tmp"; then
        rm -f "$tmp"
        log "$file already defines a spin runtime outside the managed block; left as it is" \
            "(fix: delete that table to let this installer manage it)"
        return
    fi
    if [ -n "$header" ]; then
        printf '%s\n' "$header" >>"$tmp"
    fi
    runtime_block "$version" >>"$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
        log "$file already has the spin runtime"
        return
    fi
    case "$file" in
        *.tmpl | */containerd-template.toml) log "$file is a template the distro renders: not checked with containerd" ;;
        *) validate_config "$tmp" "$file" ;;
    esac
    if [ -f "$file" ] && [ ! -e "$file.spin-backup" ]; then
        cp -p "$file" "$file.spin-backup"
        log "backup: $file.spin-backup"
    fi
    # This run's previous version, put back if the restart fails.
    if [ -f "$file" ]; then
        cp -p "$file" "$file.spin-prev"
        replaced="$replaced$file|$file.spin-prev
"
    else
        replaced="$replaced$file|-
"
    fi
    owe_restart
    [ -f "$file" ] && chmod --reference="$file" "$tmp" 2>/dev/null || true
    mv -f "$tmp" "$file"
    log "spin runtime (config version $version) written to $file"
    changed=1
}

# Version for a config that does not exist yet, from the installed containerd.
fresh_config_version() {
    major="$(containerd_major)"
    case "$major" in
        2) echo 3 ;;
        1) echo 2 ;;
        *) die "cannot tell the containerd version (no containerd binary under $host_root) to write a new config (fix: set CONTAINERD_MAJOR=1 or 2)" ;;
    esac
}

# K3s and RKE2 regenerate config.toml at every start from a template when one exists.
rancher_config() { # $1: agent containerd directory (host path)
    dir="$(h "$1")"
    if [ -f "$dir/config-v3.toml.tmpl" ] || [ "$(config_version "$dir/config.toml")" = 3 ]; then
        tmpl="$dir/config-v3.toml.tmpl"
    else
        tmpl="$dir/config.toml.tmpl"
    fi
    if [ ! -f "$tmpl" ]; then
        [ -f "$dir/config.toml" ] || die "$dir/config.toml not found: start $distro once so it writes its containerd config, then rerun"
        cp -p "$dir/config.toml" "$tmpl"
        log "created $tmpl from the generated config.toml"
        changed=1
    fi
    ensure_runtime "$tmpl" "$(config_version "$dir/config.toml")"
    # Also the generated file, so the runtime is there even before the distro regenerates it.
    if [ -f "$dir/config.toml" ]; then
        ensure_runtime "$dir/config.toml" 2
    fi
}

case "$distro" in
    containerd)
        ensure_runtime "$(h "${config_rel:-/etc/containerd/config.toml}")" detect
        ;;
    k3s) rancher_config /var/lib/rancher/k3s/agent/etc/containerd ;;
    rke2) rancher_config /var/lib/rancher/rke2/agent/etc/containerd ;;
    microk8s) ensure_runtime "$(h /var/snap/microk8s/current/args/containerd-template.toml)" 2 ;;
    k0s)
        # k0s merges drop-ins from /etc/k0s/containerd.d into its generated config.
        ensure_runtime "$(h /etc/k0s/containerd.d/spin.toml)" detect
        ;;
    *) die "unknown --distro $distro (use auto, containerd, k3s, rke2, microk8s or k0s)" ;;
esac

# --- restart ------------------------------------------------------------------------------
if [ "$changed" = 0 ]; then
    log "nothing changed; containerd not restarted"
    exit 0
fi
if [ "$restart" = none ]; then
    log "changes made; restart containerd yourself (--no-restart)"
    exit 0
fi

# From a pod (host root mounted elsewhere, hostPID) run the restart in the host's namespaces.
# HOST_NAMESPACES=here: this process already runs in the node's namespaces (not in a pod).
on_host() {
    in_host=no
    [ "${HOST_NAMESPACES:-}" = here ] && in_host=yes
    n1="$(readlink /proc/1/ns/mnt 2>/dev/null || true)"
    [ -n "$n1" ] && [ "$n1" = "$(readlink /proc/self/ns/mnt)" ] && in_host=yes
    if [ "$in_host" = no ] && [ "$host_root" != "" ] && [ "$host_root" != "/" ]; then
        nsenter --target 1 --mount --uts --ipc --net --pid -- "$@"
    else
        "$@"
    fi
}
first_active() { # prints the first systemd unit of $@ that is active
    for u in "$@"; do
        if on_host systemctl is-active --quiet "$u"; then echo "$u"; return; fi
    done
}

# Puts back every config file this run replaced.
restore_configs() {
    printf '%s' "$replaced" | while IFS='|' read -r file prev; do
        [ -n "$file" ] || continue
        if [ "$prev" = - ]; then
            rm -f "$file"
            log "removed $file (it did not exist before this run)"
        else
            mv -f "$prev" "$file"
            log "restored $file as it was before this run"
        fi
    done
}
# After a good restart: the copies of this run, and of an earlier run killed before its
# restart, are no longer needed.
forget_previous() {
    printf '%s' "$managed" | while read -r file; do
        [ -n "$file" ] && rm -f "$file.spin-prev"
    done
    return 0
}

if [ -n "${RESTART_CMD:-}" ]; then
    what="$RESTART_CMD"
    restart_containerd() { on_host sh -c "$RESTART_CMD"; }
else
    case "$distro" in
        containerd) unit=containerd ;;
        k3s) unit="$(first_active k3s k3s-agent)" ;;
        rke2) unit="$(first_active rke2-server rke2-agent)" ;;
        microk8s) unit=snap.microk8s.daemon-containerd ;;
        k0s) unit="$(first_active k0sworker k0scontroller)" ;;
    esac
    [ -n "$unit" ] || die "no active $distro service found to restart (fix: set RESTART_CMD)"
    what="systemctl restart $unit"
    restart_containerd() { on_host systemctl restart "$unit"; }
fi
log "restarting containerd: $what"
if restart_containerd; then
    forget_previous
    rm -f "$(h "$PENDING")"
    log "containerd restarted"
    exit 0
fi
log "restarting containerd failed ($what)"
if [ -n "$replaced" ]; then
    restore_configs
    if restart_containerd; then
        log "containerd restarted on the restored configuration"
    else
        log "containerd does not restart on the restored configuration either"
    fi
fi
die "containerd did not restart after the change; the previous configuration is back in place and $PENDING on the node makes the next run retry (fix: see the containerd service's log, e.g. journalctl -u containerd)"
