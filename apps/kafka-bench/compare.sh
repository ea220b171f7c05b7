#!/usr/bin/env bash
# Gateway vs Tansu under the same kafka-bench load, in one run (docs/PERFORMANCE.md,
# "Load tests"). Both brokers listen on loopback only and are restarted for every case,
# so each case starts from an empty in-memory store.
#
#   cargo build --release -p iggy-gateway-kafka && cargo build --release -p kafka-bench --features librdkafka
#   bash apps/kafka-bench/compare.sh [OUTDIR]          # matrix, latency, idle connections
#   STEADY_SECS=300 bash apps/kafka-bench/compare.sh   # plus the steady gateway run
#   ONLY=txn bash apps/kafka-bench/compare.sh          # only the transaction cases
#
# DUR (default 10) is the length of each produce run in seconds. The client is the
# kafka-bench binary with librdkafka 2.16 from .clients/librdkafka216 for both brokers:
# Tansu 0.6.0 writes ApiVersions v3 answers that librdkafka 2.0.2 cannot parse.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-/tmp/kafka-bench-compare}"
DUR="${DUR:-10}"
STEADY_SECS="${STEADY_SECS:-0}"
export ONLY="${ONLY:-all}"
BENCH="$ROOT/target/release/kafka-bench"
GATEWAY="$ROOT/target/release/iggy-gateway-kafka"
TANSU="$ROOT/.clients/tansu/tansu"
export LD_LIBRARY_PATH="$ROOT/.clients/librdkafka216${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
for f in "$BENCH" "$GATEWAY" "$TANSU" "$ROOT/.clients/librdkafka216/librdkafka.so.1"; do
  [[ -e "$f" ]] || { echo "missing $f (build in release; scripts/install-clients.sh)" >&2; exit 1; }
done

BPID=""
ADDR=""
cleanup() { [[ -n "$BPID" ]] && kill "$BPID" 2>/dev/null && wait "$BPID" 2>/dev/null; BPID=""; }
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_broker gateway|tansu [extra env for the gateway...]
start_broker() {
  local which=$1
  shift
  if [[ $which == gateway ]]; then
    # 8 GiB store cap: the default 1 GiB would refuse a fast 10 s run midway
    env IGGY_KAFKA_BIND_ADDR=127.0.0.1:0 IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES=8589934592 \
      RUST_LOG=warn "$@" "$GATEWAY" >"$OUT/gateway.stdout" 2>"$OUT/gateway.stderr" &
    BPID=$!
    for _ in $(seq 100); do
      ADDR=$(awk 'NR==1 && /^listening on /{print $3}' "$OUT/gateway.stdout")
      [[ -n "$ADDR" ]] && return 0
      sleep 0.1
    done
    echo "gateway did not start" >&2
    exit 1
  else
    local port
    port=$(free_port)
    "$TANSU" broker --listener-url "tcp://127.0.0.1:$port" \
      --advertised-listener-url "tcp://127.0.0.1:$port" \
      --storage-engine memory://tansu/ >"$OUT/tansu.log" 2>&1 &
    BPID=$!
    ADDR="127.0.0.1:$port"
    for _ in $(seq 100); do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
      sleep 0.1
    done
    echo "tansu did not start" >&2
    exit 1
  fi
}

if [[ $ONLY == all ]]; then
echo "== throughput matrix (${DUR}s per produce run)"
for size in 1024 100; do
  for parts in 1 8; do
    for prods in 1 8; do
      for broker in gateway tansu; do
        tag="$broker-r$size-p$parts-n$prods"
        start_broker "$broker"
        "$BENCH" produce --bootstrap "$ADDR" --topic bench --partitions "$parts" \
          --producers "$prods" --record-size "$size" --duration "$DUR" --acks all \
          --codec none --linger-ms 5 --batch-size 1000000 --gateway-pid "$BPID" \
          --timeout 120 --json "$OUT/$tag-produce.json" >"$OUT/$tag-produce.txt" 2>"$OUT/$tag-produce.err" || true
        # A larger prefetch queue: with the default (100000 messages) librdkafka 2.16 backs
        # off fetching for fetch.queue.backoff.ms whenever it fills, and small records fill
        # it within one or two fetches, so the client, not the broker, set the pace.
        "$BENCH" consume --bootstrap "$ADDR" --topic bench --consumers "$prods" \
          -X queued.min.messages=1000000 \
          --gateway-pid "$BPID" --timeout 120 --json "$OUT/$tag-consume.json" \
          >"$OUT/$tag-consume.txt" 2>"$OUT/$tag-consume.err" || true
        cleanup
        echo "$tag done"
      done
    done
  done
done

echo "== produce latency at 5000 records/s, 1 KiB, 1 partition, 1 producer"
for broker in gateway tansu; do
  start_broker "$broker"
  "$BENCH" produce --bootstrap "$ADDR" --topic lat --partitions 1 --producers 1 \
    --record-size 1024 --duration "$DUR" --rate 5000 --acks all --codec none --linger-ms 5 \
    --batch-size 1000000 --gateway-pid "$BPID" --timeout 120 --json "$OUT/$broker-latency.json" \
    >"$OUT/$broker-latency.txt" 2>"$OUT/$broker-latency.err" || true
  cleanup
done

echo "== 1000 idle connections"
for broker in gateway tansu; do
  start_broker "$broker"
  sleep 2
  "$BENCH" idle-connections --bootstrap "$ADDR" --count 1000 --hold 10 --gateway-pid "$BPID" \
    --json "$OUT/$broker-idle.json" >"$OUT/$broker-idle.txt" 2>"$OUT/$broker-idle.err" || true
  cleanup
done

if ((STEADY_SECS > 0)); then
  echo "== steady produce on the gateway for ${STEADY_SECS}s (retention.bytes 32 MiB)"
  start_broker gateway IGGY_KAFKA_DEFAULT_RETENTION_BYTES=33554432
  "$BENCH" produce --bootstrap "$ADDR" --topic steady --partitions 1 --producers 1 \
    --record-size 1024 --duration "$STEADY_SECS" --rate 5000 --acks all --gateway-pid "$BPID" \
    --timeout $((STEADY_SECS + 120)) --json "$OUT/gateway-steady.json" \
    >"$OUT/gateway-steady.txt" 2>"$OUT/gateway-steady.err" || true
  cleanup
fi
fi

if [[ $ONLY == all || $ONLY == txn ]]; then
  echo "== transactions: idempotent vs transactional produce, read_committed vs read_uncommitted"
  # 1 KiB records, 8 partitions, 4 producers; transactional runs commit every N records
  # per producer. Each produce run is read back at both isolation levels.
  for broker in gateway tansu; do
    for mode in idempotent txn1000 txn100; do
      case $mode in
        idempotent) flags=(--idempotent) ;;
        txn1000) flags=(--transactional --txn-records 1000) ;;
        txn100) flags=(--transactional --txn-records 100) ;;
      esac
      tag="$broker-$mode"
      start_broker "$broker"
      "$BENCH" produce --bootstrap "$ADDR" --topic txn --partitions 8 --producers 4 \
        --record-size 1024 --duration "$DUR" --acks all --codec none --linger-ms 5 \
        --batch-size 1000000 "${flags[@]}" --gateway-pid "$BPID" --timeout 120 \
        --json "$OUT/$tag-produce.json" >"$OUT/$tag-produce.txt" 2>"$OUT/$tag-produce.err" || true
      for iso in read-committed read-uncommitted; do
        "$BENCH" consume --bootstrap "$ADDR" --topic txn --consumers 4 --isolation "$iso" \
          -X queued.min.messages=1000000 --gateway-pid "$BPID" --timeout 120 \
          --json "$OUT/$tag-consume-$iso.json" >"$OUT/$tag-consume-$iso.txt" \
          2>"$OUT/$tag-consume-$iso.err" || true
      done
      cleanup
      echo "$tag done"
    done
  done
fi

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def mb(j):
    return f"{j['mb_per_sec']:.1f}" if j else "fail"
def ratio(a, b):
    return f"{a['mb_per_sec'] / b['mb_per_sec']:.2f}" if a and b and b['mb_per_sec'] else "n/a"
def cpu(j):
    b = j and j.get("broker")
    if not b or not b.get("cpu_secs_used") or not j.get("bytes"):
        return "n/a"
    return f"{b['cpu_secs_used'] / (j['bytes'] / 1e9):.2f}"
def client_cpu(j):
    if not j or j.get("client_cpu_secs") is None or not j.get("bytes"):
        return "n/a"
    return f"{j['client_cpu_secs'] / (j['bytes'] / 1e9):.2f}"
def rss(j):
    b = j and j.get("broker")
    return f"{b['peak_rss_kib_during_run'] / 1024:.0f}" if b else "n/a"
if os.environ.get("ONLY", "all") == "all":
  print("| record | partitions | producers | gateway produce MB/s | Tansu produce MB/s | ratio | gateway consume MB/s | Tansu consume MB/s | ratio | gateway CPU s/GB produced | Tansu CPU s/GB produced | client CPU s/GB producing to gateway / Tansu | gateway peak RSS MiB | Tansu peak RSS MiB |")
  print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  for size in (1024, 100):
      for parts in (1, 8):
          for prods in (1, 8):
              g = load(f"gateway-r{size}-p{parts}-n{prods}-produce.json")
              t = load(f"tansu-r{size}-p{parts}-n{prods}-produce.json")
              gc = load(f"gateway-r{size}-p{parts}-n{prods}-consume.json")
              tc = load(f"tansu-r{size}-p{parts}-n{prods}-consume.json")
              flag = lambda j: "" if j and (j.get("errors", 0) == 0 and j.get("complete", True)) else " (!)"
              print(f"| {size} B | {parts} | {prods} | {mb(g)}{flag(g)} | {mb(t)}{flag(t)} | {ratio(g, t)} | {mb(gc)}{flag(gc)} | {mb(tc)}{flag(tc)} | {ratio(gc, tc)} | {cpu(g)} | {cpu(t)} | {client_cpu(g)} / {client_cpu(t)} | {rss(g)} | {rss(t)} |")
for b in ("gateway", "tansu"):
    j = load(f"{b}-latency.json")
    if j:
        l = j["latency"]
        print(f"latency {b}: {j['records_per_sec']:.0f} rec/s p50 {l['p50_us']/1e3:.2f} ms p99 {l['p99_us']/1e3:.2f} ms p999 {l['p999_us']/1e3:.2f} ms max {l['max_us']/1e3:.2f} ms errors {j['errors']} cpu {j['broker'] and j['broker']['cpu_secs_used']}")
    j = load(f"{b}-idle.json")
    if j:
        print(f"idle {b}: {j['established']}/{j['requested']} alive {j['alive_after_hold']} rss before {j['rss_mib_before']} held {j['rss_mib_held']} after {j['rss_mib_after']} MiB, {j['per_connection_kib']} KiB/conn")
j = load("gateway-steady.json")
if j:
    b = j["broker"]
    print(f"steady gateway: {j['records']} records {j['errors']} errors, rss start {b['start']['rss_kib']/1024:.1f} peak {b['peak_rss_kib_during_run']/1024:.1f} end {b['end']['rss_kib']/1024:.1f} MiB, p99 {j['latency']['p99_us']/1e3:.2f} ms")
if load("gateway-idempotent-produce.json") or load("tansu-idempotent-produce.json"):
    print()
    print("| broker | producer mode | produce MB/s | vs idempotent | commits | broker CPU s/GB | read_committed MB/s | read_uncommitted MB/s | read_committed records (of produced) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for b in ("gateway", "tansu"):
        base = load(f"{b}-idempotent-produce.json")
        for mode in ("idempotent", "txn1000", "txn100"):
            j = load(f"{b}-{mode}-produce.json")
            rc = load(f"{b}-{mode}-consume-read-committed.json")
            ru = load(f"{b}-{mode}-consume-read-uncommitted.json")
            recs = f"{rc['records']} ({j['records']})" if rc and j else "n/a"
            print(f"| {b} | {mode} | {mb(j)} | {ratio(j, base)} | {j.get('transactions_committed', 0) if j else 'n/a'} | {cpu(j)} | {mb(rc)} | {mb(ru)} | {recs} |")
EOF
