#!/usr/bin/env bash
# Build the powercut corpus driver for RocksDB VERSION (its Java binding, rocksdbjni) into OUT:
#   OUT/lib/rocksdbjni-VERSION.jar   the release (Maven Central, org.rocksdb:rocksdbjni:VERSION)
#   OUT/lib/librocksdbjni-linux64.so the release's native library, taken out of that jar once here
#                                    (the binding loads it from java.library.path instead of
#                                    copying 12 MB into a temporary file at every start)
#   OUT/driver.jar                   Driver's classes
#   OUT/driver                       sh wrapper: exec java ... Driver run|check
# usage: build.sh VERSION OUT     (e.g. build.sh 7.6.0 /var/cache/powercut/corpus/rocksdb-7.6.0)
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 VERSION OUT" >&2
    exit 2
fi
VERSION=$1
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
SCRATCH=$OUT/scratch
rm -rf "$SCRATCH" "$OUT/lib" "$OUT/driver.jar"
mkdir -p "$SCRATCH/classes" "$OUT/lib"

sed "s/@VERSION@/$VERSION/g" "$SRC/pom.xml.in" >"$SCRATCH/pom.xml"
(cd "$SCRATCH" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$OUT/lib")
JAR=$OUT/lib/rocksdbjni-$VERSION.jar
test -f "$JAR"
(cd "$SCRATCH" && unzip -q -o "$JAR" librocksdbjni-linux64.so && mv librocksdbjni-linux64.so "$OUT/lib/")

javac -nowarn -d "$SCRATCH/classes" -cp "$JAR" "$SRC/Driver.java" "$SRC/../common/Corpus.java"
jar --create --file "$OUT/driver.jar" -C "$SCRATCH/classes" .

JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k -Xmx256m -Xlog:disable -Xlog:all=warning:stderr"
cat >"$OUT/driver" <<WRAP
#!/bin/sh
# powercut corpus driver: RocksDB $VERSION (rocksdbjni; built by workloads/corpus/rocksdb/build.sh)
exec java $JAVA_OPTS -Djava.library.path="$OUT/lib" -cp "$OUT/driver.jar:$JAR" Driver "\$@"
WRAP
chmod +x "$OUT/driver"

# smoke test on a scratch directory: the workload (no device: $POWERCUT_TIMING times the marks
# into a scratch file) and its checker
if ! (cd "$SCRATCH" && rm -rf db && POWERCUT_PARAMS='{"n": 40, "threads": 4}' \
        POWERCUT_TIMING="$SCRATCH/timing" "$OUT/driver" run >"$SCRATCH/smoke.log" 2>&1); then
    echo "smoke run failed (see $SCRATCH/smoke.log)" >&2
    exit 1
fi
acked=$(seq -s, 0 39)
if ! (cd "$SCRATCH" && echo "{\"mount\": \"$SCRATCH\", \"acked\": [$acked], \"begun\": [], \"params\": {}}" \
        | "$OUT/driver" check | tail -n 1 | tee -a "$SCRATCH/smoke.log" | grep -q '"verdict": "pass"'); then
    echo "smoke check failed (see $SCRATCH/smoke.log)" >&2
    exit 1
fi
rm -rf "$SCRATCH/db"
echo "built $OUT/driver (RocksDB $VERSION)"
