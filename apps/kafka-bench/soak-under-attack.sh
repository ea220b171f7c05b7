#!/usr/bin/env bash
# A gateway under attack keeps serving its well-behaved clients (docs/limits.md, "Soak under
# attack"). One release gateway with the embedded store serves a kafka-bench produce load of
# PRODS librdkafka producers (one connection each) plus IDLE idle connections for DUR
# seconds, while the raw-TCP attack tests (apps/gateway/tests/attack_*.rs, adversarial.rs) run
# over and over against the SAME gateway (Gateway::attack honours IGGY_KAFKA_TEST_GATEWAY).
#
#   bash scripts/install-clients.sh   # librdkafka for kafka-bench
#   bash apps/kafka-bench/soak-under-attack.sh [OUTDIR]
#
# DUR (default 600) seconds, PRODS (default 250) producers, IDLE (default 250) idle
# connections, RATE (default 20000) records/s over all producers, SIZE (default 1024).
# Passes (exit 0) when the produce run ends with zero errors, the idle connections were all
# served, every attack round passed, and the gateway is still running; prints the connection
# count, the attack rounds and the gateway's peak RSS (bound PEAK_KIB, default 2 GiB).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-/tmp/kafka-soak}"
DUR="${DUR:-600}"
PRODS="${PRODS:-250}"
IDLE="${IDLE:-250}"
RATE="${RATE:-20000}"
SIZE="${SIZE:-1024}"
cd "$ROOT"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.clients/librdkafka216${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -e "$ROOT/.clients/librdkafka216/librdkafka.so.1" ]] || { echo "run scripts/install-clients.sh first" >&2; exit 1; }

echo "building (release): gateway, kafka-bench, attack tests"
cargo build --release -q -p iggy-gateway-kafka
cargo build --release -q -p kafka-bench --features librdkafka
test_args=()
for f in apps/gateway/tests/attack_*.rs apps/gateway/tests/adversarial.rs; do
  [[ -e "$f" ]] && test_args+=(--test "$(basename "$f" .rs)")
done
cargo test --release -q -p iggy-gateway-kafka "${test_args[@]}" --no-run 2>/dev/null

# The settings the gateway runs with; attack tests that need other values skip themselves.
# The idle timeout outlasts the run, so the idle connections are meant to stay open.
SETTINGS=(
  IGGY_KAFKA_READ_TIMEOUT_SECS=3
  IGGY_KAFKA_IDLE_TIMEOUT_SECS=$((DUR + 300))
  IGGY_KAFKA_DEFAULT_RETENTION_BYTES=33554432
  IGGY_KAFKA_MEMORY_RETENTION_CHECK_INTERVAL_MS=200
)
GW_PID=""
BENCH_PIDS=()
cleanup() {
  for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -n "$GW_PID" ]] && kill "$GW_PID" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
env IGGY_KAFKA_BIND_ADDR=127.0.0.1:0 RUST_LOG=warn "${SETTINGS[@]}" \
  target/release/iggy-gateway-kafka >"$OUT/gateway.stdout" 2>"$OUT/gateway.stderr" &
GW_PID=$!
ADDR=""
for _ in $(seq 100); do
  ADDR=$(awk 'NR==1 && /^listening on /{print $3}' "$OUT/gateway.stdout")
  [[ -n "$ADDR" ]] && break
  sleep 0.1
done
[[ -n "$ADDR" ]] || { echo "gateway did not start" >&2; exit 1; }
echo "gateway pid $GW_PID on $ADDR; load for ${DUR}s: $PRODS producers at $RATE rec/s, $IDLE idle connections"

target/release/kafka-bench produce --bootstrap "$ADDR" --topic soak --partitions 8 \
  --producers "$PRODS" --record-size "$SIZE" --duration "$DUR" --rate "$RATE" --acks all \
  --codec none --gateway-pid "$GW_PID" --timeout $((DUR + 120)) \
  -X message.timeout.ms=60000 --json "$OUT/produce.json" >"$OUT/produce.txt" 2>"$OUT/produce.err" &
BENCH_PIDS+=($!)
target/release/kafka-bench idle-connections --bootstrap "$ADDR" --count "$IDLE" --hold "$DUR" \
  --json "$OUT/idle.json" >"$OUT/idle.txt" 2>"$OUT/idle.err" &
BENCH_PIDS+=($!)

export IGGY_KAFKA_TEST_GATEWAY="$ADDR" IGGY_KAFKA_TEST_GATEWAY_PID="$GW_PID"
export IGGY_KAFKA_TEST_GATEWAY_LOG="$OUT/gateway.stderr"
# The gateway's peak RSS bound for the whole run (the attacks' own bounds assume a gateway
# that serves nothing else).
PEAK_KIB="${PEAK_KIB:-2097152}"
export IGGY_KAFKA_TEST_GATEWAY_PEAK_RSS_KIB="$PEAK_KIB"
IGGY_KAFKA_TEST_GATEWAY_SETTINGS="$(IFS=';'; echo "${SETTINGS[*]}")"
export IGGY_KAFKA_TEST_GATEWAY_SETTINGS
end=$(( $(date +%s) + DUR ))
rounds=0
failed=0
max_conns=0
while (( $(date +%s) < end )); do
  rounds=$((rounds + 1))
  if cargo test --release -q -p iggy-gateway-kafka "${test_args[@]}" -- --test-threads 2 \
      >"$OUT/attack-$rounds.log" 2>&1; then
    rm -f "$OUT/attack-$rounds.log"
  else
    failed=$((failed + 1))
    echo "attack round $rounds failed: $OUT/attack-$rounds.log"
  fi
  conns=$(ls /proc/"$GW_PID"/fd 2>/dev/null | wc -l)
  (( conns > max_conns )) && max_conns=$conns
  kill -0 "$GW_PID" 2>/dev/null || { echo "the gateway died" >&2; exit 1; }
done
bench_rc=0
for p in "${BENCH_PIDS[@]}"; do wait "$p" || bench_rc=1; done
BENCH_PIDS=()
peak=$(awk '/^VmHWM/{print $2}' /proc/"$GW_PID"/status)
(( peak <= PEAK_KIB )) || { echo "gateway peak RSS $peak KiB over $PEAK_KIB KiB"; bench_rc=1; }
python3 - "$OUT" "$rounds" "$failed" "$max_conns" "$peak KiB" "$bench_rc" <<'EOF'
import json, sys
out, rounds, failed, conns, peak, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
p = json.load(open(f"{out}/produce.json"))
i = json.load(open(f"{out}/idle.json"))
print(f"produce: {p.get('records')} records acked, {p.get('errors')} errors, "
      f"{p.get('mb_per_sec', 0):.1f} MB/s, latency {json.dumps(p.get('latency'))}")
print(f"idle connections: requested {i.get('requested')}, established {i.get('established')}, "
      f"alive after hold {i.get('alive_after_hold')}, first error {i.get('first_error')}")
print(f"attack rounds: {rounds}, failed: {failed}; gateway fds at most {conns}; gateway peak RSS {peak}")
ok = rc == 0 and p.get("errors") == 0 and failed == 0 and i.get("alive_after_hold") == i.get("requested")
sys.exit(0 if ok else 1)
EOF
