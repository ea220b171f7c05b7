#!/usr/bin/env bash
# Security suite: kcat on Debian's librdkafka 2.0.2 (chosen by ../kcat_librdkafka_2_0_2.sh).
# What it covers: see kcat_security.sh.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KCAT_SUITE_BODY="$HERE/kcat_security.sh" exec bash "$HERE/../kcat_librdkafka_2_0_2.sh"
