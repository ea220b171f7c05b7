#!/usr/bin/env bash
# The cost of metrics: the gateway (embedded store) with metrics off and with metrics on
# (IGGY_KAFKA_METRICS_ADDR set, /metrics scraped every second during the run), under the
# same kafka-bench load, alternating off/on ROUNDS times in one run (docs/PERFORMANCE.md,
# "Metrics overhead").
#
#   cargo build --release -p iggy-gateway-kafka && cargo build --release -p kafka-bench --features librdkafka
#   bash apps/kafka-bench/compare-metrics.sh [OUTDIR]
#
# DUR (default 8) seconds per produce run, ROUNDS (default 3), SIZE (default 1024) bytes
# per record, PARTS (default 8) partitions, PRODS (default 4) producers and consumers.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-/tmp/kafka-bench-metrics}"
DUR="${DUR:-8}"
ROUNDS="${ROUNDS:-3}"
SIZE="${SIZE:-1024}"
PARTS="${PARTS:-8}"
PRODS="${PRODS:-4}"
BENCH="$ROOT/target/release/kafka-bench"
GATEWAY="$ROOT/target/release/iggy-gateway-kafka"
export LD_LIBRARY_PATH="$ROOT/.clients/librdkafka216${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
for f in "$BENCH" "$GATEWAY" "$ROOT/.clients/librdkafka216/librdkafka.so.1"; do
  [[ -e "$f" ]] || { echo "missing $f (build in release; scripts/install-clients.sh)" >&2; exit 1; }
done

BPID=""
SPID=""
ADDR=""
cleanup() {
  # The scraper dies of the signal, so its wait status is not 0.
  if [[ -n "$SPID" ]]; then kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null || true; fi
  if [[ -n "$BPID" ]]; then kill "$BPID" 2>/dev/null; wait "$BPID" 2>/dev/null || true; fi
  SPID=""
  BPID=""
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_gateway off|on
start_gateway() {
  local extra=()
  local http=""
  if [[ $1 == on ]]; then
    http="127.0.0.1:$(free_port)"
    extra=(IGGY_KAFKA_METRICS_ADDR="$http")
  fi
  env IGGY_KAFKA_BIND_ADDR=127.0.0.1:0 IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES=8589934592 \
    RUST_LOG=warn "${extra[@]}" "$GATEWAY" >"$OUT/gateway.stdout" 2>"$OUT/gateway.stderr" &
  BPID=$!
  for _ in $(seq 100); do
    ADDR=$(awk 'NR==1 && /^listening on /{print $3}' "$OUT/gateway.stdout")
    [[ -n "$ADDR" ]] && break
    sleep 0.1
  done
  [[ -n "$ADDR" ]] || { echo "gateway did not start" >&2; exit 1; }
  if [[ -n "$http" ]]; then
    # A scraper far more eager than Prometheus' usual 15 s.
    python3 - "$http" "$OUT/scrapes.log" <<'EOF' &
import sys, time, urllib.request
url = f"http://{sys.argv[1]}/metrics"
n = 0
with open(sys.argv[2], "a") as log:
    while True:
        try:
            body = urllib.request.urlopen(url, timeout=5).read()
            n += 1
            log.write(f"scrape {n}: {len(body)} bytes\n")
            log.flush()
        except Exception as e:  # noqa: BLE001
            log.write(f"scrape failed: {e}\n")
        time.sleep(1)
EOF
    SPID=$!
  fi
}

for round in $(seq "$ROUNDS"); do
  for mode in off on; do
    tag="$mode-$round"
    start_gateway "$mode"
    "$BENCH" produce --bootstrap "$ADDR" --topic bench --partitions "$PARTS" \
      --producers "$PRODS" --record-size "$SIZE" --duration "$DUR" --acks all \
      --codec none --linger-ms 5 --batch-size 1000000 --gateway-pid "$BPID" \
      --timeout 120 --json "$OUT/$tag-produce.json" >"$OUT/$tag-produce.txt" 2>"$OUT/$tag-produce.err" || true
    "$BENCH" consume --bootstrap "$ADDR" --topic bench --consumers "$PRODS" \
      -X queued.min.messages=1000000 --gateway-pid "$BPID" --timeout 120 \
      --json "$OUT/$tag-consume.json" >"$OUT/$tag-consume.txt" 2>"$OUT/$tag-consume.err" || true
    cleanup
    echo "$tag done"
  done
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def cpu_per_gb(j):
    b = j and j.get("broker")
    if not b or not b.get("cpu_secs_used") or not j.get("bytes"):
        return None
    return b["cpu_secs_used"] / (j["bytes"] / 1e9)
lines = ["| round | phase | off MB/s | on MB/s | on/off | off CPU-s/GB | on CPU-s/GB |",
         "|---|---|---:|---:|---:|---:|---:|"]
tot = {"produce": [0.0, 0.0], "consume": [0.0, 0.0]}
for r in range(1, rounds + 1):
    for phase in ("produce", "consume"):
        a, b = load(f"off-{r}-{phase}.json"), load(f"on-{r}-{phase}.json")
        if not a or not b:
            lines.append(f"| {r} | {phase} | fail | fail | | | |")
            continue
        tot[phase][0] += a["mb_per_sec"]
        tot[phase][1] += b["mb_per_sec"]
        ca, cb = cpu_per_gb(a), cpu_per_gb(b)
        fmt = lambda v: f"{v:.2f}" if v is not None else "n/a"
        lines.append(f"| {r} | {phase} | {a['mb_per_sec']:.1f} | {b['mb_per_sec']:.1f} | "
                     f"{b['mb_per_sec'] / a['mb_per_sec']:.3f} | {fmt(ca)} | {fmt(cb)} |")
for phase, (a, b) in tot.items():
    if a:
        lines.append(f"| all | {phase} | {a / rounds:.1f} | {b / rounds:.1f} | {b / a:.3f} | | |")
text = "\n".join(lines)
print(text)
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(text + "\n")
EOF
