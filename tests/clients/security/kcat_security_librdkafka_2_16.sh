#!/usr/bin/env bash
# Security suite: kcat on librdkafka 2.16 (chosen by ../kcat_librdkafka_2_16.sh). What it
# covers: see kcat_security.sh.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KCAT_SUITE_BODY="$HERE/kcat_security.sh" exec bash "$HERE/../kcat_librdkafka_2_16.sh"
