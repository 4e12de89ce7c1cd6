#!/usr/bin/env bash
# The main job: set up what is missing, then `powercut demo` (embedded defaults, no config): the three
# named workloads, each in a durable and a broken configuration, recorded and checked in checker VMs,
# timed with the disk cache on and off beside the TLPI suite; one report.html.  Exit 0: every cell
# as expected (a broken configuration caught is expected); 3: a cell surprised; 1: an error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
exec "${PYTHON:-python3}" -m powercut.cli demo "$@"
