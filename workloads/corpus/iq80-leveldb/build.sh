#!/usr/bin/env bash
# Build the powercut corpus driver for iq80 LevelDB VERSION into OUT:
#   OUT/lib/        the release's runtime jars (Maven Central, org.iq80.leveldb:leveldb:VERSION)
#   OUT/driver.jar  Driver's classes
#   OUT/app.jsa     a class-data-sharing archive of the driver's classes (faster JVM start-up)
#   OUT/driver      sh wrapper: exec java ... Driver run|check
# usage: build.sh VERSION OUT     (e.g. build.sh 0.8 /var/cache/powercut/corpus/iq80-leveldb-0.8)
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
rm -rf "$SCRATCH" "$OUT/lib" "$OUT/driver.jar" "$OUT/app.jsa"
mkdir -p "$SCRATCH/classes" "$OUT/lib"

sed "s/@VERSION@/$VERSION/g" "$SRC/pom.xml.in" >"$SCRATCH/pom.xml"
(cd "$SCRATCH" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$OUT/lib")
test -f "$OUT/lib/leveldb-$VERSION.jar"

javac -nowarn -d "$SCRATCH/classes" -cp "$OUT/lib/*" "$SRC/Driver.java" "$SRC/../common/Corpus.java"
jar --create --file "$OUT/driver.jar" -C "$SCRATCH/classes" .

# iq80 LevelDB unmaps its memory-mapped files through DirectByteBuffer.cleaner() by reflection:
# on Java 9+ that needs java.nio (and the cleaner's package) opened to it.
JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k -Xmx256m -Xlog:disable -Xlog:all=warning:stderr"
JAVA_OPTS="$JAVA_OPTS --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED"
CP="$OUT/driver.jar:$OUT/lib/*"

# Class-data sharing: one workload run (timing mode, no device) on a scratch directory records
# the classes the driver loads; the wrapper maps them at start-up if the archive fits.
if (cd "$SCRATCH" && rm -rf db && POWERCUT_TIMING="$SCRATCH/timing" POWERCUT_PARAMS='{"n": 10}' \
        java $JAVA_OPTS -XX:ArchiveClassesAtExit="$OUT/app.jsa" -cp "$CP" Driver run \
        >"$SCRATCH/cds.log" 2>&1); then
    echo "CDS archive: $OUT/app.jsa"
else
    echo "warning: no CDS archive (see $SCRATCH/cds.log)" >&2
    rm -f "$OUT/app.jsa"
fi

cat >"$OUT/driver" <<WRAP
#!/bin/sh
# powercut corpus driver: iq80 LevelDB $VERSION (built by workloads/corpus/iq80-leveldb/build.sh)
CDS=
[ -f "$OUT/app.jsa" ] && CDS="-XX:SharedArchiveFile=$OUT/app.jsa"
exec java $JAVA_OPTS -Xshare:auto \$CDS -cp "$CP" Driver "\$@"
WRAP
chmod +x "$OUT/driver"
echo "built $OUT/driver (iq80 LevelDB $VERSION)"
