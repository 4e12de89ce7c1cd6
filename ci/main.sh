#!/usr/bin/env bash
# The main job: set up what is missing, then the default campaign (embedded defaults, no config).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
exec "${PYTHON:-python3}" -m powercut.cli run "$@"
