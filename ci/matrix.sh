#!/usr/bin/env bash
# The whole verdict matrix (every workload variant on ext4 ordered/journal/writeback, xfs and btrfs,
# every model in its row), checked in checker VMs; results in runs/matrix/matrix.{md,json}.
# CI runs only its part (tests/vm/test_matrix_vm.py: `powercut matrix --ci`).  Extra arguments go to
# `powercut matrix` (e.g. 'wal/*' to run one workload, --check-in host on a disposable machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
exec "${PYTHON:-python3}" -m powercut.cli matrix --out runs/matrix "$@"
