#!/usr/bin/env bash
# The test suite, VM tests included (they boot real VMs: KVM where it works, else TCG).
#
#   bash ci/test.sh              the README's test command: every test but the long end-to-end runs
#                                marked `nightly` (tests/README.md says which and what covers each
#                                capability in this run); at most 40 minutes on 2 cores (31-35 min
#                                on 2026-11-28; trim before adding VM tests: the limit is 90)
#   bash ci/test.sh --nightly    everything, the nightly runs too (.github/workflows/suite-nightly.yml)
#   bash ci/test.sh ARGS...      ARGS go to pytest (e.g. -k NAME, tests/unit)
#
# Every run writes its JUnit XML to $TEST_OUT/junit.xml (runs/tests) and ends with what it cost
# (ci/suite_times.py: the total and the slowest tests; compare two runs with --before).
set -uo pipefail
cd "$(dirname "$0")/.."
tier=(-m "not nightly")
if [ "${1:-}" = "--nightly" ]; then
    tier=()
    shift
fi
bash ci/setup.sh || exit 1
# lint (ruff, mypy) first; its failure fails the run, but the tests still run (and show)
lint=0
bash ci/lint.sh || lint=$?
bash ci/start-libvirtd.sh || exit 1
out=${TEST_OUT:-runs/tests}
mkdir -p "$out"
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider "${tier[@]}" --junitxml="$out/junit.xml" "$@" tests
rc=$?
if [ $rc -eq 5 ]; then
    echo "test.sh: pytest collected no tests: that is a failure here" >&2
    rc=1
fi
[ -s "$out/junit.xml" ] && "${PYTHON:-python3}" ci/suite_times.py "$out/junit.xml" --top 25
if [ $lint -ne 0 ]; then
    echo "test.sh: ci/lint.sh failed (exit $lint; see its findings above the tests)" >&2
    [ $rc -ne 0 ] || rc=1
fi
exit $rc
