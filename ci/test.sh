#!/usr/bin/env bash
# The whole test suite, VM tests included (they boot real VMs: KVM where it works, else TCG).
set -uo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh || exit 1
# lint (ruff, mypy) first; its failure fails the run, but the tests still run (and show)
lint=0
bash ci/lint.sh || lint=$?
bash ci/start-libvirtd.sh || exit 1
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider --durations=25 "$@" tests
rc=$?
if [ $rc -eq 5 ]; then
    echo "test.sh: pytest collected no tests: that is a failure here" >&2
    rc=1
fi
if [ $lint -ne 0 ]; then
    echo "test.sh: ci/lint.sh failed (exit $lint; see its findings above the tests)" >&2
    [ $rc -ne 0 ] || rc=1
fi
exit $rc
