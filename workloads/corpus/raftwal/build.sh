#!/usr/bin/env bash
# build.sh VERSION OUT -- the driver (OUT/driver) against github.com/hashicorp/raft-wal at the pinned
# VERSION, from the Go module proxy.
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 VERSION OUT (e.g. v0.4.0 /var/cache/powercut/corpus/raftwal-v0.4.0)" >&2; exit 2; fi
VERSION="v${1#v}"
OUT="$(mkdir -p "$2" && cd "$2" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$OUT/src"
rm -rf "$SRC"
mkdir -p "$SRC"
cp "$HERE/main.go" "$SRC/main.go"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
cd "$SRC"
go mod init powercut.invalid/raftwal-driver >/dev/null 2>&1
go mod edit -go=1.21
# raft-wal at the release asked for; hashicorp/raft at the release that raft-wal's go.mod requires
go get "github.com/hashicorp/raft-wal@$VERSION" "github.com/hashicorp/raft@v1.4.0"
go mod tidy
got="$(go list -m -f '{{.Version}}' github.com/hashicorp/raft-wal)"
[ "$got" = "$VERSION" ] || { echo "build.sh: raft-wal resolved to $got, not $VERSION" >&2; exit 1; }
go build -trimpath -o "$OUT/driver.tmp" .
mv -f "$OUT/driver.tmp" "$OUT/driver"
echo "built $OUT/driver (raft-wal $VERSION)"
