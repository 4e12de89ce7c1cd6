#!/usr/bin/env bash
# build.sh VERSION OUT: the fjall driver against fjall =VERSION (and its lsm-tree =VERSION), as OUT/driver.
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
# one target dir per program, shared by its versions (the binary is copied out right away)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/powercut/corpus/fjall-target}"
(cd "$SCRATCH" && cargo build --release --quiet)
install -m 0755 "$CARGO_TARGET_DIR/release/driver" "$OUT/driver.new"
mv -f "$OUT/driver.new" "$OUT/driver"
echo "built $OUT/driver (fjall $VERSION)"
