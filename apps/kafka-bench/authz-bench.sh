#!/usr/bin/env bash
# What authorization costs, in one run (docs/PERFORMANCE.md and docs/authorization.md,
# "Cost").
#
# Two gateways (embedded store) side by side, each with one SASL_PLAINTEXT listener on
# loopback (PLAIN), the same users file and the same ACL file of 100 bindings (literal and
# prefixed, ALLOW and DENY, topics and groups, 24 principals besides the bench user). One
# has authorization on with allow-everyone-if-no-ACL-found off, so every request of the
# bench user (not a super user) is decided by the ACLs: its topic is reachable only
# through a PREFIXED grant, with a DENY on a neighbouring name to evaluate on the way. The
# other has IGGY_KAFKA_AUTHORIZATION_ENABLED=false and nothing else changed. Produce for
# DUR seconds then consume 1 KiB records, alternating between the two, ROUNDS times each
# (one topic per gateway, its size capped by retention.bytes); prints the on/off ratios of
# produce and consume MB/s (the goal is >= 0.97, within 3%).
#
#   cargo build --release -p iggy-gateway-kafka -p kafka-bench --features kafka-bench/librdkafka
#   bash apps/kafka-bench/authz-bench.sh [OUTDIR]
#
# Knobs (environment): DUR seconds per produce run (10), RETAIN bytes per partition
# (536870912), PARTITIONS (3), PRODUCERS (1), ROUNDS (3), RECORD_SIZE bytes (1024),
# LINGER_MS (5) and BATCH_SIZE (1000000) of the producer (small records with LINGER_MS=0
# make many small requests, where a per-request cost shows most), TARGET (target dir;
# default $CARGO_TARGET_DIR or ./target). Everything stays on loopback.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=apps/kafka-bench/bench-lib.sh
. "$ROOT/apps/kafka-bench/bench-lib.sh"
OUT="${1:-/tmp/kafka-bench-authz}"
DUR="${DUR:-10}"
RETAIN="${RETAIN:-536870912}"
PARTITIONS="${PARTITIONS:-3}"
PRODUCERS="${PRODUCERS:-1}"
ROUNDS="${ROUNDS:-3}"
RECORD_SIZE="${RECORD_SIZE:-1024}"
LINGER_MS="${LINGER_MS:-5}"
BATCH_SIZE="${BATCH_SIZE:-1000000}"
TARGET="${TARGET:-${CARGO_TARGET_DIR:-$ROOT/target}}"
BENCH="$TARGET/release/kafka-bench"
GATEWAY="$TARGET/release/iggy-gateway-kafka"
USER_NAME=bench
# A throwaway password for a throwaway users file on loopback.
USER_PASSWORD="bench-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
mkdir -p "$OUT"
rm -f "$OUT"/*.json
for f in "$BENCH" "$GATEWAY"; do
  [[ -x "$f" ]] || { echo "missing $f (see the build command at the top)" >&2; exit 1; }
done

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  PIDS=()
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

echo "== users file ($USER_NAME, PLAIN)"
USERS="$OUT/users.json"
rm -f "$USERS"
printf '%s\n' "$USER_PASSWORD" | "$GATEWAY" users set-password --file "$USERS" "$USER_NAME"

echo "== ACL file: 100 bindings"
ACLS="$OUT/acls.json"
python3 - "$ACLS" "$USER_NAME" <<'EOF_PY'
import json, sys
path, user = sys.argv[1], sys.argv[2]
b = []
def add(rtype, name, principal, op, pattern="LITERAL", permission="ALLOW"):
    b.append({"resource_type": rtype, "name": name, "pattern": pattern, "principal": principal,
              "operation": op, "permission": permission})
# the bench user: its topics through PREFIXED grants, a DENY on a neighbouring name
for op in ("WRITE", "READ", "CREATE"):
    add("TOPIC", "bench-", f"User:{user}", op, "PREFIXED")
add("TOPIC", "bench-quarantine", f"User:{user}", "ALL", permission="DENY")
# 24 other tenants, four bindings each
for i in range(24):
    t = f"tenant{i:02d}"
    add("TOPIC", f"{t}-", f"User:{t}", "ALL", "PREFIXED")
    add("GROUP", f"{t}-", f"User:{t}", "READ", "PREFIXED")
    add("TOPIC", f"{t}-events", f"User:{t}", "WRITE")
    add("TOPIC", f"{t}-audit", f"User:{t}", "WRITE", permission="DENY")
assert len(b) == 100, len(b)
json.dump({"bindings": b}, open(path, "w"), indent=1)
EOF_PY

P_ON=$(free_port)
P_OFF=$(free_port)
start() {
  local name=$1 port=$2 enabled=$3
  env IGGY_KAFKA_DEFAULT_RETENTION_BYTES="$RETAIN" \
    IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES=$((2 * RETAIN * PARTITIONS + (1 << 30))) \
    IGGY_KAFKA_LISTENERS="SASL_PLAINTEXT://127.0.0.1:$port" IGGY_KAFKA_SASL_MECHANISMS=PLAIN \
    IGGY_KAFKA_SASL_USERS_FILE="$USERS" IGGY_KAFKA_SUPER_USERS=User:admin \
    IGGY_KAFKA_ACL_FILE="$ACLS" IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND=false \
    IGGY_KAFKA_AUTHORIZATION_ENABLED="$enabled" \
    RUST_LOG=warn,iggy_gateway_kafka=info "$GATEWAY" >"$OUT/gateway-$name.stdout" 2>"$OUT/gateway-$name.stderr" &
  PIDS+=($!)
  wait_listening "$port" "$!" "$OUT/gateway-$name.stderr"
}
echo "== gateways: authorization on :$P_ON, off :$P_OFF"
start on "$P_ON" true
start off "$P_OFF" false
grep -ih "authorization" "$OUT/gateway-on.stderr" "$OUT/gateway-off.stderr" | cut -c1-220 || true

export KAFKA_BENCH_SASL_USERNAME="$USER_NAME" KAFKA_BENCH_SASL_PASSWORD="$USER_PASSWORD"
SEC=(--security-protocol sasl_plaintext --sasl-mechanism PLAIN)

echo "== produce ${DUR}s and consume, $RECORD_SIZE-byte records, linger.ms $LINGER_MS, batch.size $BATCH_SIZE, $PARTITIONS partition(s), $PRODUCERS producer(s), $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  # alternate which goes first, so that neither always runs on a warmer machine
  if ((round % 2)); then
    produce_consume off "$P_OFF" "${PIDS[1]}" "$round" "${SEC[@]}"
    produce_consume on "$P_ON" "${PIDS[0]}" "$round" "${SEC[@]}"
  else
    produce_consume on "$P_ON" "${PIDS[0]}" "$round" "${SEC[@]}"
    produce_consume off "$P_OFF" "${PIDS[1]}" "$round" "${SEC[@]}"
  fi
done
cleanup

python3 - "$OUT" "$ROUNDS" <<'EOF_PY'
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def ok(j):
    return j is not None and j.get("errors", 0) == 0 and j.get("bytes", 0) > 0
def per_gb(j):
    cpu = (j.get("broker") or {}).get("cpu_secs_used") if ok(j) else None
    return cpu / (j["bytes"] / 1e9) if cpu is not None else None
f = lambda v, d=1: f"{v:.{d}f}" if v is not None else "fail"
print("| round | mode | authz off MB/s | authz on MB/s | on/off | gateway CPU s/GB off | on |")
print("|---:|---|---:|---:|---:|---:|---:|")
sums = {m: [[], [], [], []] for m in ("produce", "consume")}
for r in range(1, rounds + 1):
    for mode in ("produce", "consume"):
        off, on = load(f"off-{r}-{mode}.json"), load(f"on-{r}-{mode}.json")
        a = off["mb_per_sec"] if ok(off) else None
        b = on["mb_per_sec"] if ok(on) else None
        if a and b:
            sums[mode][0].append(a)
            sums[mode][1].append(b)
        ca, cb = per_gb(off), per_gb(on)
        if ca and cb:
            sums[mode][2].append(ca)
            sums[mode][3].append(cb)
        print(f"| {r} | {mode} | {f(a)} | {f(b)} | {f(b / a, 3) if a and b else 'n/a'} | {f(ca, 2)} | {f(cb, 2)} |")
print()
mean = lambda xs: sum(xs) / len(xs) if xs else None
def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2) if xs else None
# The per-round ratio compares two runs made one after the other; its median is the least
# disturbed by what else the machine was doing during one run.
for mode in ("produce", "consume"):
    a, b, ca, cb = sums[mode]
    if a and b:
        ratios = [y / x for x, y in zip(a, b)]
        med = median(ratios)
        verdict = "meets" if med >= 0.97 else "BELOW"
        cpu = f"; gateway CPU median {median(ca):.2f} off vs {median(cb):.2f} on s/GB" if ca and cb else ""
        print(f"authz on/off {mode}: mean {mean(b):.1f} / {mean(a):.1f} MB/s = {mean(b) / mean(a):.3f}; "
              f"median of the {len(ratios)} round ratios {med:.3f} ({verdict} the 0.97 goal){cpu}")
    else:
        print(f"authz on/off {mode}: n/a (a run failed; see {out}/*.err)")
EOF_PY
