#!/usr/bin/env bash
# build.sh VERSION OUT -- the pinned etcd VERSION (OUT/etcd: etcdmain.Main in a five-line main) and
# the driver (OUT/driver: a clientv3 program at the same release), from the Go module proxy.
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 VERSION OUT (e.g. v3.5.5 /var/cache/powercut/corpus/etcd-defrag-v3.5.5)" >&2; exit 2; fi
VERSION="v${1#v}"
OUT="$(mkdir -p "$2" && cd "$2" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$OUT/src"
rm -rf "$SRC"
mkdir -p "$SRC/cmd/etcd" "$SRC/cmd/driver"
cp "$HERE/etcd/main.go" "$SRC/cmd/etcd/main.go"
cp "$HERE/driver/"*.go "$SRC/cmd/driver/"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
cd "$SRC"
go mod init powercut.invalid/etcd-defrag >/dev/null 2>&1
go mod edit -go=1.21
go get "go.etcd.io/etcd/server/v3@$VERSION" "go.etcd.io/etcd/client/v3@$VERSION" "go.etcd.io/etcd/api/v3@$VERSION"
go mod tidy
# the release asked for, not one MVS raised
for m in server/v3 client/v3 api/v3; do
  got="$(go list -m -f '{{.Version}}' "go.etcd.io/etcd/$m")"
  [ "$got" = "$VERSION" ] || { echo "build.sh: go.etcd.io/etcd/$m resolved to $got, not $VERSION" >&2; exit 1; }
done
go build -trimpath -o "$OUT/etcd.tmp" ./cmd/etcd
go build -trimpath -o "$OUT/driver.tmp" ./cmd/driver
ver="$("$OUT/etcd.tmp" --version)"
case "$ver" in
  *"etcd Version: ${VERSION#v}"*) ;;
  *) echo "build.sh: the etcd built is not $VERSION: $ver" >&2; exit 1 ;;
esac
mv -f "$OUT/etcd.tmp" "$OUT/etcd"
mv -f "$OUT/driver.tmp" "$OUT/driver"
echo "built ${ver%%$'\n'*} and driver into $OUT"
