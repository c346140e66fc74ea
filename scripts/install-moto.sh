#!/usr/bin/env bash
# Installs moto's server (a local implementation of AWS's SQS and DynamoDB APIs, from PyPI)
# into a venv outside the clone, for the tests of the DynamoDB key-value store and the SQS
# trigger. Prints the path of the `moto_server` executable. Idempotent.
set -euo pipefail
version="5.1.*"
venv="${MOTO_VENV:-/var/cache/containerd-shim-spin-v2/moto-venv}"
if [ ! -x "$venv/bin/moto_server" ]; then
    echo "moto: installing moto[server]==$version into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]==$version" >&2
fi
echo "$venv/bin/moto_server"
