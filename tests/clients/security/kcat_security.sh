#!/usr/bin/env bash
# Security suite body for kcat: kcat_security_librdkafka_2_0_2.sh and
# kcat_security_librdkafka_2_16.sh run ../kcat_librdkafka_<version>.sh with
# KCAT_SUITE_BODY pointing here; that wrapper picks the librdkafka and sets SUITE_NAME.
#
# Env (set by apps/gateway/tests/support/security.rs): BOOTSTRAP (a SASL_SSL listener),
# TOPIC_PREFIX, CA_FILE, PLAIN_USER/PLAIN_PASSWORD, SCRAM_USER/SCRAM_PASSWORD (kcat has no
# admin API: the harness creates the SCRAM credentials with `users set-scram`).
# Per mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over SASL_SSL: one kcat -P run per
# partition auto-creates the mechanism's topic and sends keyed records, a balanced consumer
# (-G, its own group) reads them all back and commits, and a second run of the same group
# finds nothing left (the commit held). A wrong password must end with an authentication
# error, not a hang.
set -euo pipefail
: "${SUITE_NAME:?set by the wrapper}"
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "[$(date +%H:%M:%S)] $*"; }
for v in BOOTSTRAP CA_FILE PLAIN_USER PLAIN_PASSWORD SCRAM_USER SCRAM_PASSWORD; do
  [[ -n "${!v:-}" ]] || fail "$v is not set (the harness in apps/gateway/tests/support/security.rs sets it)"
done
PREFIX="${TOPIC_PREFIX:-security-$$-$(date +%s)}"
TIMEOUT=30
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
step "$SUITE_NAME: kcat $(kcat -V 2>&1 | sed -n 's/^Version \([0-9.]*\).*/\1/p' | head -1), librdkafka $(kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][0-9.]*\) builtin.*/\1/p' | head -1), bootstrap $BOOTSTRAP"

kcat_as() { # $1 seconds, $2 mechanism, $3 user, $4 password, then kcat arguments
  local secs="$1" mech="$2" user="$3" password="$4"
  shift 4
  timeout "$secs" kcat -b "$BOOTSTRAP" -X "client.id=security-$SUITE_NAME" -X socket.timeout.ms=20000 \
    -X security.protocol=SASL_SSL -X "ssl.ca.location=$CA_FILE" \
    -X "sasl.mechanisms=$mech" -X "sasl.username=$user" -X "sasl.password=$password" "$@"
}

round_trip() { # $1 label, $2 mechanism, $3 user, $4 password
  local label="$1" mech="$2" user="$3" password="$4"
  local topic="$PREFIX-$SUITE_NAME-$label" group="$PREFIX-$SUITE_NAME-$label-group"
  : >"$WORK/sent"
  local p i out
  for p in 0 1 2; do
    for i in 0 1; do printf '%s-key-%s-%s|%s-value-%s-%s\n' "$label" "$p" "$i" "$label" "$p" "$i"; done >"$WORK/in"
    cat "$WORK/in" >>"$WORK/sent"
    if ! out="$(kcat_as "$TIMEOUT" "$mech" "$user" "$password" \
        -P -t "$topic" -p "$p" -K '|' -X topic.request.required.acks=-1 -X message.send.max.retries=0 \
        <"$WORK/in" 2>&1)"; then
      fail "$label: produce to $topic partition $p failed: $out"
    fi
    grep -qi 'error\|fail' <<<"$out" && fail "$label: produce to $topic partition $p: $out"
  done
  # kcat -G exits after -c records; the group commits on close
  if ! kcat_as "$TIMEOUT" "$mech" "$user" "$password" \
      -G "$group" -c 6 -f '%k|%s\n' -X auto.offset.reset=earliest "$topic" >"$WORK/got" 2>"$WORK/err"; then
    fail "$label: group $group read $(wc -l <"$WORK/got") of 6 records within ${TIMEOUT}s: $(tail -5 "$WORK/err")"
  fi
  if ! diff <(sort "$WORK/sent") <(sort "$WORK/got") >"$WORK/diff"; then
    fail "$label: the records read back differ from the ones sent: $(cat "$WORK/diff")"
  fi
  # the same group again: everything was committed, so nothing is left to read
  kcat_as 15 "$mech" "$user" "$password" \
    -G "$group" -e -f '%k|%s\n' -X auto.offset.reset=earliest "$topic" >"$WORK/again" 2>"$WORK/err" || true
  [[ ! -s "$WORK/again" ]] || fail "$label: group $group read again after committing: $(head -3 "$WORK/again")"
  step "$label: 6 records produced and consumed by group $group"
}

refused() { # $1 label, $2 mechanism, $3 user, $4 password: metadata must fail with an auth error
  local label="$1" out
  if out="$(kcat_as "$TIMEOUT" "$2" "$3" "$4" \
      -L -m 10 2>&1)"; then
    fail "$label: kcat -L succeeded with a wrong password"
  fi
  grep -qiE 'authentication failed|SASL authentication error|_AUTHENTICATION|Authentication failure' <<<"$out" ||
    fail "$label: no authentication error within ${TIMEOUT}s: $(grep -i 'fail\|error' <<<"$out" | tail -5)"
  step "$label: refused ($(grep -ioE '[^|]*authentication (failed|error|failure)[^|]{0,80}' <<<"$out" | head -1))"
}

round_trip plain PLAIN "$PLAIN_USER" "$PLAIN_PASSWORD"
round_trip scram-sha-256 SCRAM-SHA-256 "$SCRAM_USER" "$SCRAM_PASSWORD"
round_trip scram-sha-512 SCRAM-SHA-512 "$SCRAM_USER" "$SCRAM_PASSWORD"
refused "wrong PLAIN password" PLAIN "$PLAIN_USER" "not-$PLAIN_PASSWORD"
echo "OK $SUITE_NAME security"
