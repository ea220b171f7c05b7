#!/usr/bin/env bash
# Client suite: kcat on librdkafka 2.16 (the .so shipped in the confluent-kafka wheel, linked
# into .clients/librdkafka216 by scripts/install-clients.sh; override with KCAT_LIBRDKAFKA_DIR).
# Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX. What it covers: see kcat_suite.sh.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LD_LIBRARY_PATH="${KCAT_LIBRDKAFKA_DIR:-$HERE/../../.clients/librdkafka216}"
command -v kcat >/dev/null || { echo "FAIL: kcat is not installed" >&2; exit 1; }
v="$(kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][0-9.]*\) builtin.*/\1/p' | head -1)"
[[ "$v" == 2.16.* ]] || { echo "FAIL: kcat runs on librdkafka '$v' (LD_LIBRARY_PATH=$LD_LIBRARY_PATH), expected 2.16.x" >&2; exit 1; }
SUITE_NAME=kcat-rdkafka-2-16
# KCAT_SUITE_BODY: another body on the same librdkafka (security/kcat_security.sh)
source "${KCAT_SUITE_BODY:-$HERE/kcat_suite.sh}"
