#!/usr/bin/env bash
# build.sh VERSION OUT: the commonware-storage driver against commonware-storage =VERSION (and the
# commonware crates of the same release), as OUT/driver.
set -euo pipefail
VERSION="$1"
OUT="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SCRATCH="$OUT/build"
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/src"
sed "s/@VERSION@/$VERSION/g" "$HERE/Cargo.toml.in" >"$SCRATCH/Cargo.toml"
cp "$HERE/src/main.rs" "$SCRATCH/src/main.rs"
# From 2026.9.0 on, Oversized's mutating methods consume the journal and hand it back.
FEATURES=""
case "$VERSION" in
  2026.7.*|2026.8.*|2026.[1-6].*|2025.*) ;;
  *) FEATURES="--features owned" ;;
esac
# one target dir per program, shared by its versions (the binary is copied out right away)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/powercut/corpus/commonware-target}"
(cd "$SCRATCH" && cargo build --release --quiet $FEATURES)
install -m 0755 "$CARGO_TARGET_DIR/release/driver" "$OUT/driver.new"
mv -f "$OUT/driver.new" "$OUT/driver"
echo "built $OUT/driver (commonware-storage $VERSION)"
