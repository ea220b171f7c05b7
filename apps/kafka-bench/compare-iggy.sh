#!/usr/bin/env bash
# Gateway with the Iggy bridge vs the native Iggy SDK, on the same Iggy server, in one run
# (docs/PERFORMANCE.md, "Load tests" > "Gateway with the Iggy bridge vs the native Iggy
# SDK"). Every case starts a fresh iggy-server (new data directory, loopback ports), a
# gateway on it, runs kafka-bench produce + consume through the gateway (librdkafka 2.16)
# on topic `gw`, stops the gateway, then iggy-produce + iggy-consume with the SDK on topic
# `nat` of the same server, and removes the server's data.
#
#   cargo build --release -p iggy-gateway-kafka
#   cargo build --release -p kafka-bench --features librdkafka,iggy-native
#   IGGY_SERVER_BIN=/path/to/iggy-server bash apps/kafka-bench/compare-iggy.sh [OUTDIR]
#
# DUR (default 8): seconds of each produce run. CASES: "RECORD:PARTITIONS:PRODUCERS ..."
# (default the 1 KiB / 100 B x 1 / 8 partitions matrix with one producer). LAT=1 (default)
# adds the latency case: 1 KiB records at RATE (default 2000) records/s, 1 partition.
# MEM=1 (default) also runs the gateway's produce + consume with its embedded store (no
# Iggy) in each case: the same client load with no Iggy behind it, i.e. what the Kafka
# client and the gateway's front end allow on this machine. BASE_GATEWAY=/path/to/binary
# (an earlier build of the gateway) runs every gateway case (bridged, and embedded with MEM=1)
# with that binary too, on a fresh Iggy server of its own, right after the same case with
# target/release's gateway, and adds a table of the gateway's CPU per GB, before and after.
# RELAY=1 also runs the native SDK's produce + consume of each case through
# `kafka-bench relay` (a process that only moves bytes) on the same Iggy server, topic
# `rel`, sampling the relay's CPU: the floor of any process in the gateway's place, in the
# same minutes as the gateway's runs (the relay's cost per byte rises as the pace falls,
# so compare the two only within one run).
# BLAST=1 also produces through the gateway with `kafka-bench blast` (pre-encoded Produce
# requests of about 1 MB, one connection per producer; topic `gwbl`, after the consume), a
# client that costs next to no CPU: what the gateway and Iggy reach when librdkafka does
# not take the cores, against the native SDK. Each connection keeps 5 requests in flight
# (librdkafka's limit for an idempotent producer); the native SDK's producers keep one.
# The tables are printed at the end and kept in OUTDIR/summary.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-/tmp/kafka-bench-iggy}"
DUR="${DUR:-8}"
CASES="${CASES:-1024:1:1 1024:8:1 100:1:1 100:8:1}"
LAT="${LAT:-1}"
MEM="${MEM:-1}"
RELAY="${RELAY:-0}"
BLAST="${BLAST:-0}"
RATE="${RATE:-2000}"
BASE_GATEWAY="${BASE_GATEWAY:-}"
IGGY_BIN="${IGGY_SERVER_BIN:?set IGGY_SERVER_BIN to an iggy-server binary}"
BENCH="$ROOT/target/release/kafka-bench"
GATEWAY="$ROOT/target/release/iggy-gateway-kafka"
export LD_LIBRARY_PATH="$ROOT/.clients/librdkafka216${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
USER_NAME=iggy
PASSWORD=kafka-bench
mkdir -p "$OUT"
for f in "$BENCH" "$GATEWAY" "$IGGY_BIN" "$ROOT/.clients/librdkafka216/librdkafka.so.1" $BASE_GATEWAY; do
  [[ -e "$f" ]] || { echo "missing $f" >&2; exit 1; }
done

IPID="" GPID="" RPID="" IADDR="" GADDR="" RADDR="" IDIR=""
stop_pid() { # SIGTERM, wait up to 10 s, then SIGKILL; only pids this script started
  local pid=$1
  [[ -z "$pid" ]] && return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop_pid "$GPID"; GPID=""
  stop_pid "$RPID"; RPID=""
  stop_pid "$IPID"; IPID=""
  [[ -n "$IDIR" ]] && rm -rf "$IDIR/data"
  IDIR=""
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
cpu_secs() { # utime + stime of a pid, seconds
  awk -v t="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t}' "/proc/$1/stat"
}

start_iggy() {
  IDIR="$OUT/iggy-$1"
  rm -rf "$IDIR"; mkdir -p "$IDIR"
  IADDR="127.0.0.1:$(free_port)"
  (cd "$IDIR" && exec env IGGY_SYSTEM_PATH="$IDIR/data" IGGY_TCP_ADDRESS="$IADDR" \
    IGGY_HTTP_ENABLED=false IGGY_QUIC_ENABLED=false IGGY_WEBSOCKET_ENABLED=false \
    IGGY_HTTP_ADDRESS="127.0.0.1:$(free_port)" IGGY_QUIC_ADDRESS="127.0.0.1:$(free_port)" \
    IGGY_WEBSOCKET_ADDRESS="127.0.0.1:$(free_port)" \
    IGGY_ROOT_USERNAME=$USER_NAME IGGY_ROOT_PASSWORD=$PASSWORD IGGY_TELEMETRY_ENABLED=false \
    "$IGGY_BIN" >"$IDIR/server.log" 2>&1) &
  IPID=$!
  for _ in $(seq 600); do
    python3 -c "import socket,sys; socket.create_connection(('${IADDR%:*}', ${IADDR##*:}), 1)" 2>/dev/null && return 0
    kill -0 "$IPID" 2>/dev/null || { tail "$IDIR/server.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "iggy-server did not listen on $IADDR" >&2; exit 1
}

start_memory_gateway() { # TAG [BINARY]
  env IGGY_KAFKA_BIND_ADDR=127.0.0.1:0 IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES=8589934592 \
    RUST_LOG=warn "${2:-$GATEWAY}" >"$OUT/memory-$1.stdout" 2>"$OUT/memory-$1.stderr" &
  GPID=$!
  for _ in $(seq 300); do
    GADDR=$(awk '/^listening on /{print $3; exit}' "$OUT/memory-$1.stdout")
    [[ -n "$GADDR" ]] && return 0
    kill -0 "$GPID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$OUT/memory-$1.stderr" >&2; echo "gateway did not start" >&2; exit 1
}

start_gateway() { # TAG [BINARY]
  env IGGY_KAFKA_BIND_ADDR=127.0.0.1:0 IGGY_KAFKA_BRIDGE_ENABLED=true \
    IGGY_KAFKA_IGGY_ADDR="$IADDR" IGGY_KAFKA_IGGY_USERNAME=$USER_NAME \
    IGGY_KAFKA_IGGY_PASSWORD=$PASSWORD RUST_LOG=warn \
    "${2:-$GATEWAY}" >"$OUT/gateway-$1.stdout" 2>"$OUT/gateway-$1.stderr" &
  GPID=$!
  for _ in $(seq 300); do
    GADDR=$(awk '/^listening on /{print $3; exit}' "$OUT/gateway-$1.stdout")
    [[ -n "$GADDR" ]] && return 0
    kill -0 "$GPID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$OUT/gateway-$1.stderr" >&2; echo "gateway did not start" >&2; exit 1
}

# run NAME CMD...: runs a bench command (bounded), records the Iggy server's CPU seconds
run() {
  local name=$1; shift
  local c0 c1
  c0=$(cpu_secs "$IPID")
  timeout 180 "$@" >"$OUT/$name.txt" 2>&1 || echo "$name: exit $?" | tee -a "$OUT/failures"
  c1=$(cpu_secs "$IPID")
  echo "$name iggy_cpu_s=$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}')" | tee -a "$OUT/iggy-cpu.txt"
}

# gateway_case KIND BINARY: produce + consume through the gateway on the current Iggy
# server (KIND gw: target/release's gateway, gwb: BASE_GATEWAY), then stops it
gateway_case() {
  local kind=$1 bin=$2
  start_gateway "$tag-$kind" "$bin"
  run "$tag-$kind-produce" "$BENCH" produce --bootstrap "$GADDR" --topic "$kind" \
    --partitions "$parts" --producers "$prods" --record-size "$rs" --duration "$DUR" \
    --acks all --codec none --linger-ms 5 --batch-size 1000000 --gateway-pid "$GPID" \
    --timeout 120 --json "$OUT/$tag-$kind-produce.json"
  run "$tag-$kind-consume" "$BENCH" consume --bootstrap "$GADDR" --topic "$kind" \
    --consumers "$prods" -X queued.min.messages=1000000 --gateway-pid "$GPID" --timeout 120 \
    --json "$OUT/$tag-$kind-consume.json"
  if [[ $BLAST == 1 ]]; then
    run "$tag-$kind-blast" "$BENCH" blast --bootstrap "$GADDR" --topic "${kind}bl" \
      --partitions "$parts" --connections "$prods" --record-size "$rs" --duration "$DUR" \
      --batch-size 1000000 --max-in-flight 5 \
      --gateway-pid "$GPID" --timeout 120 \
      --json "$OUT/$tag-$kind-blast.json"
  fi
  stop_pid "$GPID"; GPID=""
}

# memory_case KIND BINARY: the same load on the gateway's embedded store (KIND mem or memb)
memory_case() {
  local kind=$1 bin=$2
  start_memory_gateway "$tag-$kind" "$bin"
  for mode in produce consume; do
    if [[ $mode == produce ]]; then
      set -- produce --bootstrap "$GADDR" --topic mem --partitions "$parts" \
        --producers "$prods" --record-size "$rs" --duration "$DUR" --acks all --codec none \
        --linger-ms 5 --batch-size 1000000
    else
      set -- consume --bootstrap "$GADDR" --topic mem --consumers "$prods" \
        -X queued.min.messages=1000000
    fi
    timeout 180 "$BENCH" "$@" --gateway-pid "$GPID" --timeout 120 \
      --json "$OUT/$tag-$kind-$mode.json" >"$OUT/$tag-$kind-$mode.txt" 2>&1 \
      || echo "$tag-$kind-$mode: exit $?" | tee -a "$OUT/failures"
  done
  stop_pid "$GPID"; GPID=""
}

# relay_case: the native SDK's produce + consume through a relay to the current Iggy
# server, the relay's CPU sampled as the broker's
relay_case() {
  "$BENCH" relay --upstream "$IADDR" --listen 127.0.0.1:0 --timeout 600 \
    --json "$OUT/$tag-relay.json" >"$OUT/$tag-relay.stdout" 2>"$OUT/$tag-relay.stderr" &
  RPID=$!
  RADDR=""
  for _ in $(seq 100); do
    RADDR=$(awk '/listening on/{sub(",", "", $5); print $5; exit}' "$OUT/$tag-relay.stderr")
    [[ -n "$RADDR" ]] && break
    kill -0 "$RPID" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$RADDR" ]] || { cat "$OUT/$tag-relay.stderr" >&2; echo "relay did not start" >&2; exit 1; }
  run "$tag-rel-produce" "$BENCH" iggy-produce --iggy-addr "$RADDR" --username $USER_NAME \
    --password $PASSWORD --topic rel --partitions "$parts" --producers "$prods" \
    --record-size "$rs" --duration "$DUR" --batch-size 1000000 --gateway-pid "$RPID" \
    --timeout 120 --json "$OUT/$tag-rel-produce.json"
  run "$tag-rel-consume" "$BENCH" iggy-consume --iggy-addr "$RADDR" --username $USER_NAME \
    --password $PASSWORD --topic rel --consumers "$prods" --poll-count "$poll" \
    --gateway-pid "$RPID" --timeout 120 --json "$OUT/$tag-rel-consume.json"
  stop_pid "$RPID"; RPID=""
}

for c in $CASES; do
  IFS=: read -r rs parts prods <<<"$c"
  tag="r${rs}-p${parts}-n${prods}"
  poll=$((1048576 / rs))
  echo "== $tag"
  start_iggy "$tag"
  gateway_case gw "$GATEWAY"
  run "$tag-nat-produce" "$BENCH" iggy-produce --iggy-addr "$IADDR" --username $USER_NAME \
    --password $PASSWORD --topic nat --partitions "$parts" --producers "$prods" \
    --record-size "$rs" --duration "$DUR" --batch-size 1000000 --gateway-pid "$IPID" \
    --timeout 120 --json "$OUT/$tag-nat-produce.json"
  run "$tag-nat-consume" "$BENCH" iggy-consume --iggy-addr "$IADDR" --username $USER_NAME \
    --password $PASSWORD --topic nat --consumers "$prods" --poll-count "$poll" \
    --gateway-pid "$IPID" --timeout 120 --json "$OUT/$tag-nat-consume.json"
  [[ $RELAY == 1 ]] && relay_case
  cleanup
  if [[ -n $BASE_GATEWAY ]]; then
    start_iggy "$tag-base"
    gateway_case gwb "$BASE_GATEWAY"
    cleanup
  fi
  if [[ $MEM == 1 ]]; then
    memory_case mem "$GATEWAY"
    [[ -n $BASE_GATEWAY ]] && memory_case memb "$BASE_GATEWAY"
  fi
done

if [[ $LAT == 1 ]]; then
  tag=lat
  echo "== $tag"
  start_iggy "$tag"
  start_gateway "$tag"
  for linger in 0 5; do
    run "$tag-gw-linger$linger" "$BENCH" produce --bootstrap "$GADDR" --topic "gw$linger" \
      --partitions 1 --producers 1 --record-size 1024 --duration 10 --rate "$RATE" --acks all \
      --codec none --linger-ms "$linger" --gateway-pid "$GPID" --timeout 120 \
      --json "$OUT/$tag-gw-linger$linger.json"
  done
  stop_pid "$GPID"; GPID=""
  run "$tag-nat" "$BENCH" iggy-produce --iggy-addr "$IADDR" --username $USER_NAME \
    --password $PASSWORD --topic nat --partitions 1 --producers 1 --record-size 1024 \
    --duration 10 --rate "$RATE" --batch-size 1024 --gateway-pid "$IPID" --timeout 120 \
    --json "$OUT/$tag-nat.json"
  cleanup
fi
# The tables of docs/PERFORMANCE.md from the JSON results, into $OUT/summary.md.
python3 - "$OUT" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, sys
out = sys.argv[1]
def load(name):
    path = os.path.join(out, name + ".json")
    return json.load(open(path)) if os.path.exists(path) else None
iggy = {}
for line in open(os.path.join(out, "iggy-cpu.txt")):
    name, value = line.split()
    iggy[name] = float(value.split("=")[1])
def mbs(j):
    return (j or {}).get("mb_per_sec", 0.0)
def ratio(a, b):
    return f"{mbs(a) / mbs(b):.2f}" if mbs(b) else "-"
def broker_cpu(j):
    return ((j or {}).get("broker") or {}).get("cpu_secs_used")
def per_gb(secs, j):
    gb = (j or {}).get("bytes", 0) / 1e9
    return f"{secs / gb:.2f}" if secs is not None and gb else "-"
tags = sorted({os.path.basename(f).split("-gw-")[0] for f in glob.glob(out + "/r*-gw-produce.json")},
              key=lambda t: [int(x[1:]) for x in t.split("-")])
print("| record | partitions | producers | gw produce MB/s | native produce MB/s | ratio | embedded produce MB/s | gw consume MB/s | native consume MB/s | ratio | embedded consume MB/s | gw p99 ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in tags:
    rs, ps, ns = [x[1:] for x in t.split("-")]
    gp, gc, np_, nc = (load(f"{t}-{k}") for k in ("gw-produce", "gw-consume", "nat-produce", "nat-consume"))
    mp, mc = load(f"{t}-mem-produce"), load(f"{t}-mem-consume")
    p99 = f"{gp['latency']['p99_us'] / 1000:.0f}" if gp else "-"
    print(f"| {rs} B | {ps} | {ns} | {mbs(gp):.1f} | {mbs(np_):.1f} | **{ratio(gp, np_)}** | {mbs(mp):.1f} "
          f"| {mbs(gc):.1f} | {mbs(nc):.1f} | **{ratio(gc, nc)}** | {mbs(mc):.1f} | {p99} |")
print()
print("CPU seconds per GB moved (client = kafka-bench with librdkafka or the Iggy SDK):")
print()
print("| record | partitions | producers | produce gw: client / gateway / Iggy | produce native: client / Iggy | consume gw: client / gateway / Iggy | consume native: client / Iggy |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for t in tags:
    rs, ps, ns = [x[1:] for x in t.split("-")]
    cells = []
    for mode in ("produce", "consume"):
        g, n = load(f"{t}-gw-{mode}"), load(f"{t}-nat-{mode}")
        cells.append(" / ".join(per_gb(x, g) for x in ((g or {}).get("client_cpu_secs"), broker_cpu(g), iggy.get(f"{t}-gw-{mode}"))))
        cells.append(" / ".join(per_gb(x, n) for x in ((n or {}).get("client_cpu_secs"), iggy.get(f"{t}-nat-{mode}"))))
    print(f"| {rs} B | {ps} | {ns} | " + " | ".join(cells) + " |")
if glob.glob(out + "/r*-gwb-produce.json"):
    print()
    print("Gateway CPU seconds per GB, BASE_GATEWAY (before) -> target/release (after), same run; "
          "last column: (gateway + Iggy) over Iggy alone with the native SDK:")
    print()
    print("| record | partitions | producers | bridged produce | bridged consume | embedded produce | embedded consume | bridged produce MB/s | (gw+Iggy)/native Iggy, produce before -> after | consume before -> after |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    def gwcpu(name):
        j = load(name)
        c = broker_cpu(j)
        gb = (j or {}).get("bytes", 0) / 1e9
        return c / gb if c is not None and gb else None
    def iggy_gb(name):
        j = load(name)
        gb = (j or {}).get("bytes", 0) / 1e9
        return iggy[name] / gb if name in iggy and gb else None
    def f(x):
        return f"{x:.2f}" if x is not None else "-"
    def ratio_total(kind, mode):
        g, i, n = gwcpu(f"{t}-{kind}-{mode}"), iggy_gb(f"{t}-{kind}-{mode}"), iggy_gb(f"{t}-nat-{mode}")
        return (g + i) / n if None not in (g, i, n) and n else None
    for t in tags:
        rs, ps, ns = [x[1:] for x in t.split("-")]
        cells = []
        for a, b in (("gwb-produce", "gw-produce"), ("gwb-consume", "gw-consume"), ("memb-produce", "mem-produce"), ("memb-consume", "mem-consume")):
            cells.append(f"{f(gwcpu(f'{t}-{a}'))} -> {f(gwcpu(f'{t}-{b}'))}")
        cells.append(f"{mbs(load(f'{t}-gwb-produce')):.1f} -> {mbs(load(f'{t}-gw-produce')):.1f}")
        for mode in ("produce", "consume"):
            cells.append(f"{f(ratio_total('gwb', mode))} -> {f(ratio_total('gw', mode))}")
        print(f"| {rs} B | {ps} | {ns} | " + " | ".join(cells) + " |")
if glob.glob(out + "/r*-gw-blast.json"):
    print()
    print("Produce with a client that costs next to no CPU (`kafka-bench blast`, one connection per "
          "producer) against the native SDK, same run; CPU seconds per GB:")
    print()
    print("| record | partitions | producers | blast MB/s | native MB/s | ratio | blast: client / gateway / Iggy | native: client / Iggy | (gw+Iggy)/native Iggy |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in tags:
        rs, ps, ns = [x[1:] for x in t.split("-")]
        b, n = load(f"{t}-gw-blast"), load(f"{t}-nat-produce")
        def gb(j):
            return (j or {}).get("bytes", 0) / 1e9
        total = "-"
        if b and n and gb(b) and gb(n) and broker_cpu(b) is not None and f"{t}-nat-produce" in iggy:
            nat = iggy[f"{t}-nat-produce"] / gb(n)
            if nat:
                total = f"{(broker_cpu(b) + iggy.get(f'{t}-gw-blast', 0)) / gb(b) / nat:.2f}"
        print(f"| {rs} B | {ps} | {ns} | {mbs(b):.1f} | {mbs(n):.1f} | **{ratio(b, n)}** "
              f"| {' / '.join(per_gb(x, b) for x in ((b or {}).get('client_cpu_secs'), broker_cpu(b), iggy.get(f'{t}-gw-blast')))} "
              f"| {' / '.join(per_gb(x, n) for x in ((n or {}).get('client_cpu_secs'), iggy.get(f'{t}-nat-produce')))} | {total} |")
if glob.glob(out + "/r*-rel-produce.json"):
    print()
    print("CPU seconds per GB of record bytes: the gateway (bridged, with librdkafka) against a relay "
          "that only moves bytes between the native SDK and the same Iggy server, same run:")
    print()
    print("| record | partitions | producers | produce: gateway / relay | consume: gateway / relay | produce MB/s: gateway / relay | consume MB/s: gateway / relay |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for t in tags:
        rs, ps, ns = [x[1:] for x in t.split("-")]
        cells = []
        for mode in ("produce", "consume"):
            g, r = load(f"{t}-gw-{mode}"), load(f"{t}-rel-{mode}")
            cells.append(f"{per_gb(broker_cpu(g), g)} / {per_gb(broker_cpu(r), r)}")
        for mode in ("produce", "consume"):
            g, r = load(f"{t}-gw-{mode}"), load(f"{t}-rel-{mode}")
            cells.append(f"{mbs(g):.1f} / {mbs(r):.1f}")
        print(f"| {rs} B | {ps} | {ns} | " + " | ".join(cells) + " |")
print()
for name in ("lat-gw-linger0", "lat-gw-linger5", "lat-nat"):
    j = load(name)
    if j:
        l = j["latency"]
        print(f"{name}: {j['records_per_sec']:.0f} records/s, p50 {l['p50_us'] / 1000:.2f} p99 {l['p99_us'] / 1000:.2f} "
              f"p999 {l['p999_us'] / 1000:.2f} max {l['max_us'] / 1000:.2f} ms, broker cpu {broker_cpu(j) or 0:.2f} s, iggy cpu {iggy.get(name, 0):.2f} s")
PY
echo "done: $OUT"
