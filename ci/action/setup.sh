#!/usr/bin/env bash
# The action's setup step (mode shard): `powercut setup` as root (the Debian packages the crash
# tests need, with apt-get, and the guest image: built once, then found in the cache that the
# action restores), then `powercut doctor`, which exits non-zero, saying why, when crash tests
# cannot run here.
#
# Environment: PYTHON (the action's venv Python, with powercut).
set -euo pipefail
PY=${PYTHON:-python3}
cache=${POWERCUT_CACHE:-$HOME/.cache/powercut}
if [ "$(id -u)" = 0 ]; then as_root=(env); else as_root=(sudo --preserve-env env "PATH=$PATH"); fi
pc() { "${as_root[@]}" "POWERCUT_CACHE=$cache" "$PY" -m powercut.cli "$@"; }
pc setup
rc=0; pc doctor || rc=$?
# the cache is saved after the job by the runner's user: give it the files root wrote
[ "$(id -u)" = 0 ] || sudo chown -R "$(id -u):$(id -g)" "$cache"
exit "$rc"
