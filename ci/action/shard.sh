#!/usr/bin/env bash
# The action's shard step (mode shard): the project's crash tests of shard I/N, as root (the VMs'
# loop and dm devices), into OUT: OUT/junit.xml, OUT/pytest.log, OUT/tests/<test>/ (each crash
# test's recording manifest and check output: report.html, summary.json, repro bundles) and
# OUT/shard.json (python -m powercut.campaign.ghsummary shard: the shard, pytest's status, the
# acceleration the VMs actually used).  The recordings' disk and log files are dropped unless
# KEEP_RECORDINGS=true (the repro bundles carry their own log).
#
# Environment: PYTHON (the action's venv Python), SHARD (I/N; 1/1), TESTS (pytest's arguments: test
# paths, -k, --powercut-* options; shell words), ACCEL (auto | kvm | tcg; kvm), OUT (powercut-out).
# Exit status: 0 every test passed (or the shard had none), 3 a test failed, 1 an error: pytest did
# not finish, or KVM was asked for and a VM ran under TCG.  Writes status=... to $GITHUB_OUTPUT.
# No bytecode is written: root-owned __pycache__ in the workspace would outlive the job on a
# self-hosted runner.
set -uo pipefail
PY=${PYTHON:-python3}
SHARD=${SHARD:-1/1}
ACCEL=${ACCEL:-kvm}
OUT=$(realpath -m "${OUT:-powercut-out}")
cache=${POWERCUT_CACHE:-$HOME/.cache/powercut}
say() { echo "powercut-action: $*" >&2; }
finish() { [ -z "${GITHUB_OUTPUT:-}" ] || echo "status=$1" >> "$GITHUB_OUTPUT"; exit "$1"; }

case "$ACCEL" in auto|kvm|tcg) ;; *) say "accel wants auto, kvm or tcg, not '$ACCEL'"; finish 2 ;; esac
[[ "$SHARD" =~ ^[0-9]+/[0-9]+$ ]] || { say "shard wants I/N (e.g. 2/4), not '$SHARD'"; finish 2; }
words=$("$PY" -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "${TESTS:-}" 2>/dev/null) ||
    { say "tests: not shell words (an unclosed quote?): ${TESTS:-}"; finish 2; }
args=()
[ -z "$words" ] || mapfile -t args <<< "$words"
if [ -e "$OUT" ]; then rm -rf "$OUT" || { say "cannot clear $OUT"; finish 1; }; fi
mkdir -p "$OUT"
if [ "$(id -u)" = 0 ]; then as_root=(env); else as_root=(sudo --preserve-env env "PATH=$PATH"); fi

say "shard $SHARD: pytest ${args[*]} (accel $ACCEL) -> $OUT"
"${as_root[@]}" "POWERCUT_CACHE=$cache" PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest "${args[@]}" -p no:cacheprovider \
    --powercut-shard "$SHARD" --powercut-accel "$ACCEL" --powercut-out "$OUT/tests" \
    --junitxml "$OUT/junit.xml" 2>&1 | tee "$OUT/pytest.log"
rc=${PIPESTATUS[0]}
if [ "$(id -u)" != 0 ]; then   # the upload and the cache are the runner's user's
    sudo chown -R "$(id -u):$(id -g)" "$OUT"
    [ ! -d "$cache" ] || sudo chown -R "$(id -u):$(id -g)" "$cache"
fi
keep=()
[ "${KEEP_RECORDINGS:-false}" != true ] || keep=(--keep-recordings)
"$PY" -m powercut.campaign.ghsummary shard "$OUT" --shard "$SHARD" --accel "$ACCEL" --pytest-status "$rc" "${keep[@]}"
finish $?
