#!/usr/bin/env bash
# The action's merge step (mode merge): every shard's output under SHARDS (the artifacts
# <prefix>-shard-I-of-N that the shard steps uploaded, as actions/download-artifact unpacks them:
# one directory each) merged into OUT/merged: junit.xml, report.html, summary.json, summary.md and
# each crash test's check output with its repro bundles (python -m powercut.campaign.ghsummary
# merge); summary.md is appended to the job summary ($GITHUB_STEP_SUMMARY).
#
# Environment: PYTHON (the action's venv Python), OUT (powercut-out), SHARDS ($OUT/shards), ARTIFACT
# (the artifacts' name prefix, powercut).
# Exit status: 0 every test of every shard passed, 3 a test failed, 1 an error (a shard missing or
# broken, KVM asked for and TCG used), 2 nothing to merge.  Writes status=... to $GITHUB_OUTPUT.
set -uo pipefail
PY=${PYTHON:-python3}
OUT=$(realpath -m "${OUT:-powercut-out}")
SHARDS=${SHARDS:-$OUT/shards}
say() { echo "powercut-action: $*" >&2; }
finish() { [ -z "${GITHUB_OUTPUT:-}" ] || echo "status=$1" >> "$GITHUB_OUTPUT"; exit "$1"; }

outs=()
for d in "$SHARDS"/*/; do [ -f "$d/shard.json" ] && outs+=("${d%/}"); done
if [ ${#outs[@]} = 0 ]; then
    msg="no shard output under $SHARDS: did every shard job fail before its upload?"
    say "$msg"
    [ -z "${GITHUB_STEP_SUMMARY:-}" ] || printf '## :warning: powercut crash tests: error\n\n%s\n' "$msg" >> "$GITHUB_STEP_SUMMARY"
    finish 2
fi
summary=()
[ -z "${GITHUB_STEP_SUMMARY:-}" ] || summary=(--step-summary "$GITHUB_STEP_SUMMARY")
"$PY" -m powercut.campaign.ghsummary merge "${outs[@]}" -o "$OUT/merged" --artifact-prefix "${ARTIFACT:-powercut}" \
    "${summary[@]}"
finish $?
