#!/usr/bin/env bash
# Client suite: kcat on Debian's librdkafka 2.0.2 (old librdkafka: a regression client).
# Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX. What it covers: see kcat_suite.sh.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
unset LD_LIBRARY_PATH
command -v kcat >/dev/null || { echo "FAIL: kcat is not installed" >&2; exit 1; }
v="$(kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][0-9.]*\) builtin.*/\1/p' | head -1)"
[[ "$v" == 2.0.2 ]] || { echo "FAIL: kcat runs on librdkafka '$v', expected 2.0.2" >&2; exit 1; }
SUITE_NAME=kcat-rdkafka-2-0-2
# KCAT_SUITE_BODY: another body on the same librdkafka (security/kcat_security.sh)
source "${KCAT_SUITE_BODY:-$HERE/kcat_suite.sh}"
