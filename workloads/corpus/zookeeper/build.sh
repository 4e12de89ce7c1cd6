#!/usr/bin/env bash
# Build the powercut corpus driver for Apache ZooKeeper VERSION into OUT:
#   OUT/lib/      the release's runtime jars (Maven Central, org.apache.zookeeper:zookeeper:VERSION)
#   OUT/driver.jar  Driver's classes and logback.xml (ZooKeeper's log: warnings, on stderr)
#   OUT/app.jsa   a class-data-sharing archive of the driver's classes (faster JVM start-up)
#   OUT/driver    sh wrapper: exec java ... Driver run|check
# usage: build.sh VERSION OUT     (e.g. build.sh 3.9.2 /var/cache/powercut/corpus/zookeeper-3.9.2)
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
test -f "$OUT/lib/zookeeper-$VERSION.jar"

javac -nowarn -d "$SCRATCH/classes" -cp "$OUT/lib/*" "$SRC/Driver.java" "$SRC/../common/Corpus.java"
cp "$SRC/logback.xml" "$SCRATCH/classes/logback.xml"
# a jar, not a class folder: class-data sharing takes only jars on the class path
jar --create --file "$OUT/driver.jar" -C "$SCRATCH/classes" .

JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k -Xmx256m -Xlog:disable -Xlog:all=warning:stderr"
CP="$OUT/driver.jar:$OUT/lib/*"

# Class-data sharing: one workload run (timing mode, no device) on a scratch directory records
# the classes the server and client load; the wrapper maps them at start-up if the archive fits.
if (cd "$SCRATCH" && rm -rf zk && POWERCUT_TIMING="$SCRATCH/timing" POWERCUT_PARAMS='{"n": 30}' \
        java $JAVA_OPTS -XX:ArchiveClassesAtExit="$OUT/app.jsa" -cp "$CP" Driver run \
        >"$SCRATCH/cds.log" 2>&1); then
    echo "CDS archive: $OUT/app.jsa"
else
    echo "warning: no CDS archive (see $SCRATCH/cds.log)" >&2
    rm -f "$OUT/app.jsa"
fi

cat >"$OUT/driver" <<WRAP
#!/bin/sh
# powercut corpus driver: Apache ZooKeeper $VERSION (built by workloads/corpus/zookeeper/build.sh)
CDS=
[ -f "$OUT/app.jsa" ] && CDS="-XX:SharedArchiveFile=$OUT/app.jsa"
exec java $JAVA_OPTS -Xshare:auto \$CDS -cp "$CP" Driver "\$@"
WRAP
chmod +x "$OUT/driver"
echo "built $OUT/driver (ZooKeeper $VERSION)"
