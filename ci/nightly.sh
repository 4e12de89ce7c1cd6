#!/usr/bin/env bash
# The nightly crash-test campaign, the same steps the GitHub Actions workflow
# (.github/workflows/nightly.yml) runs on its runners, here on one machine:
#
#   bash ci/nightly.sh                      every row: record, check in N shards, merge   (N: $SHARDS, 3)
#   bash ci/nightly.sh rows                 the row names, one per line (the workflow's matrix)
#   bash ci/nightly.sh record ROW           record ROW into $OUT/ROW/rec
#   bash ci/nightly.sh check ROW I/N        check shard I/N of it into $OUT/ROW/shard-I
#   bash ci/nightly.sh merge ROW            merge the shards into $OUT/ROW/merged (summary, junit, bundles)
#   bash ci/nightly.sh schedules            $SCHEDULE_ROW recorded under each of $SCHEDULES ($REPEAT times
#                                           each, repeat k sampling with seed+k), each judged: $OUT/schedules
#   bash ci/nightly.sh explore              $EXPLORE_ROW's races explored (run --explore-races: one recording
#                                           per file it synced, only that file's syncs held): $OUT/explore
#   bash ci/nightly.sh corpus               the corpus of published durability bugs (docs/corpus.md): each
#                                           buggy and fixed release built once, recorded, judged: $OUT/corpus
#
# A row is WORKLOAD:FS[:k=v,...] (the workload's params; delay-sync=GLOB=TIME among them holds those
# files' syncs while recording, --delay-sync).  Environment: OUT (runs/nightly), SHARDS (3),
# ROWS (space-separated rows; default below), MAX_STATES (per model per shard run; 0 = all),
# CHECK_IN (vm), JOBS (checker VMs per shard; 0 = one per core), SETUP=0 skips ci/setup.sh,
# SEED (the seed of the sampled states, one for every shard of a run; default: today's date, so a
# nightly samples other states each night; the workflow passes its run id).  Schedules (docs/races.md):
# SCHEDULE_ROW (append-fsync:ext4:n=8), SCHEDULES (the disk latencies: none,hdd), REPEAT (2).
# Races (docs/races.md): EXPLORE_ROW (twofile:ext4:n=6), EXPLORE_BUDGET (8 recordings after the first).
# The corpus: CORPUS (space-separated entry names; default every entry).
# Exit status: 0 every merged row passed, 3 a row has confirmed failures, 1 an error or a row that
# is not complete (a missing shard, an interrupted check).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-runs/nightly}
SHARDS=${SHARDS:-3}
MAX_STATES=${MAX_STATES:-0}
CHECK_IN=${CHECK_IN:-vm}
JOBS=${JOBS:-0}
SEED=${SEED:-$(date -u +%Y%m%d)}
ROWS=${ROWS:-"append-fsync:ext4:n=8 wal:xfs:n=8 filestorage:ext4:fsync=2,n=6 osync:ext4:mode=o_sync,total=16384,bs=4096"}
SCHEDULE_ROW=${SCHEDULE_ROW:-append-fsync:ext4:n=8}
SCHEDULES=${SCHEDULES:-none,hdd}
REPEAT=${REPEAT:-2}
EXPLORE_ROW=${EXPLORE_ROW:-twofile:ext4:n=6}
EXPLORE_BUDGET=${EXPLORE_BUDGET:-8}
pc() { "$PY" -m powercut.cli "$@"; }
say() { echo "nightly: $*" >&2; }

row_dir() { echo "$OUT/${1//[:=,\/*]/_}"; }

# the options of a row's params: --param k=v each, --delay-sync GLOB=TIME for delay-sync=GLOB=TIME
row_args() {
    local params=$1 kv p
    [ -n "$params" ] || return 0
    IFS=, read -r -a kv <<< "$params"
    for p in "${kv[@]}"; do
        case "$p" in
            delay-sync=*) printf '%s\0' --delay-sync "${p#delay-sync=}" ;;
            *) printf '%s\0' --param "$p" ;;
        esac
    done
}

record() {
    local row=$1 wl fs params args=()
    IFS=: read -r wl fs params <<< "$row"
    [ -n "$wl" ] && [ -n "$fs" ] || { say "a row is WORKLOAD:FS[:k=v,...], not '$row'"; return 2; }
    mapfile -d '' -t args < <(row_args "$params")
    local d; d=$(row_dir "$row")
    mkdir -p "$d"
    say "record $row -> $d/rec"
    pc record --workload "$wl" --fs "$fs" "${args[@]}" -o "$d/rec" --force
}

check() {
    local row=$1 shard=$2 d; d=$(row_dir "$row")
    local i=${shard%/*}
    say "check $row shard $shard -> $d/shard-$i"
    local rc=0
    pc check "$d/rec" --shard "$shard" -o "$d/shard-$i" --check-in "$CHECK_IN" -j "$JOBS" \
        --max-states "$MAX_STATES" --seed "$SEED" --force || rc=$?
    # 3 (confirmed failures) is a verdict, not a broken step: the merge reports it
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || return "$rc"
}

schedules() {
    local wl fs params args=()
    IFS=: read -r wl fs params <<< "$SCHEDULE_ROW"
    mapfile -d '' -t args < <(row_args "$params")
    say "schedules: $SCHEDULE_ROW under $SCHEDULES, $REPEAT each -> $OUT/schedules"
    pc run --workload "$wl" --fs "$fs" "${args[@]}" --disk-latency "$SCHEDULES" --repeat "$REPEAT" \
        -o "$OUT/schedules" --check-in "$CHECK_IN" -j "$JOBS" --max-states "$MAX_STATES" --seed "$SEED"
}

explore() {
    local wl fs params args=()
    IFS=: read -r wl fs params <<< "$EXPLORE_ROW"
    mapfile -d '' -t args < <(row_args "$params")
    say "explore: $EXPLORE_ROW, one recording per synced file (budget $EXPLORE_BUDGET) -> $OUT/explore"
    pc run --workload "$wl" --fs "$fs" "${args[@]}" --explore-races --budget "$EXPLORE_BUDGET" \
        -o "$OUT/explore" --check-in "$CHECK_IN" -j "$JOBS" --max-states "$MAX_STATES" --seed "$SEED"
}

corpus() {
    local names=()
    read -r -a names <<< "${CORPUS:-}"
    say "corpus: ${CORPUS:-every entry} -> $OUT/corpus"
    pc corpus --build-only "${names[@]}"   # the one step that needs the network
    pc corpus "${names[@]}" -o "$OUT/corpus"
}

merge() {
    local row=$1 d; d=$(row_dir "$row")
    local shards=("$d"/shard-*)
    [ -e "${shards[0]}" ] || { say "no shard output under $d"; return 1; }
    say "merge $row: ${#shards[@]} shard(s) -> $d/merged"
    pc merge "${shards[@]}" -o "$d/merged"
}

case "${1:-all}" in
    rows) for r in $ROWS; do echo "$r"; done ;;
    record) record "$2" ;;
    check) check "$2" "$3" ;;
    merge) merge "$2" ;;
    schedules) schedules ;;
    explore) explore ;;
    corpus) corpus ;;
    all)
        [ "${SETUP:-1}" = 0 ] || bash ci/setup.sh
        worst=0
        for row in $ROWS; do
            record "$row"
            for i in $(seq 1 "$SHARDS"); do check "$row" "$i/$SHARDS"; done
            rc=0; merge "$row" || rc=$?
            say "$row: merged exit $rc"
            if [ "$rc" = 1 ] || { [ "$rc" = 3 ] && [ "$worst" = 0 ]; }; then worst=$rc; fi
            [ "$rc" = 0 ] || [ "$rc" = 1 ] || [ "$rc" = 3 ] || worst=1
        done
        for step in schedules explore corpus; do
            rc=0; "$step" || rc=$?
            say "$step: exit $rc"
            if [ "$rc" = 1 ] || { [ "$rc" = 3 ] && [ "$worst" = 0 ]; }; then worst=$rc; fi
            [ "$rc" = 0 ] || [ "$rc" = 1 ] || [ "$rc" = 3 ] || worst=1
        done
        exit "$worst" ;;
    *) say "unknown step '$1': all, rows, record ROW, check ROW I/N, merge ROW, schedules, explore, corpus"; exit 2 ;;
esac
