#!/usr/bin/env bash
# The whole test suite, VM tests included (they boot real VMs: KVM where it works, else TCG).
set -uo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh || exit 1
bash ci/start-libvirtd.sh || exit 1
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider --durations=25 "$@" tests
rc=$?
if [ $rc -eq 5 ]; then
    echo "test.sh: pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit $rc
