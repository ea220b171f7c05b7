#!/usr/bin/env bash
# What TLS and SASL cost, in one run of one gateway (docs/PERFORMANCE.md, "Security").
#
# One gateway (embedded store) with three listeners at once: PLAINTEXT, SSL and SASL_SSL
# on loopback, with a certificate made here by openssl. Produce for DUR seconds then
# consume 1 KiB records on the PLAINTEXT and the SSL listener, alternating, ROUNDS times
# each (one topic per listener, its size capped by retention.bytes so memory stays
# bounded; each consume reads what the topic holds); prints the SSL/PLAINTEXT ratios of
# produce and consume MB/s (the goal is >= 0.85). Then SASL_SSL authentications per second
# for SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, with the connection creation rate cap
# (default 1000/s) lifted so that the logins, not the cap, set the pace.
#
#   cargo build --release -p iggy-gateway-kafka -p kafka-bench --features kafka-bench/librdkafka
#   bash apps/kafka-bench/security-bench.sh [OUTDIR]
#
# Knobs (environment): DUR seconds per produce run (10), RETAIN bytes per partition
# (1073741824), PARTITIONS (1), PRODUCERS (1), ROUNDS (2), AUTH_SECS (10), AUTH_WORKERS
# (8), CONN_RATE (1000000), TARGET (target dir; default $CARGO_TARGET_DIR or ./target). The client is librdkafka as linked (Debian's 2.0.2);
# LD_LIBRARY_PATH=.clients/librdkafka216 swaps in 2.16.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=apps/kafka-bench/bench-lib.sh
. "$ROOT/apps/kafka-bench/bench-lib.sh"
OUT="${1:-/tmp/kafka-bench-security}"
DUR="${DUR:-10}"
RETAIN="${RETAIN:-1073741824}"
CONN_RATE="${CONN_RATE:-1000000}"
PARTITIONS="${PARTITIONS:-1}"
PRODUCERS="${PRODUCERS:-1}"
ROUNDS="${ROUNDS:-2}"
AUTH_SECS="${AUTH_SECS:-10}"
AUTH_WORKERS="${AUTH_WORKERS:-8}"
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
command -v openssl >/dev/null || { echo "needs openssl" >&2; exit 1; }

GPID=""
cleanup() { [[ -n "$GPID" ]] && kill "$GPID" 2>/dev/null && wait "$GPID" 2>/dev/null; GPID=""; }
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

echo "== certificates (openssl, EC P-256, SAN 127.0.0.1 and localhost)"
CERTS="$OUT/certs"
mkdir -p "$CERTS"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=kafka-bench test CA" -keyout "$CERTS/ca.key" -out "$CERTS/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=localhost" -keyout "$CERTS/server.key" -out "$CERTS/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$CERTS/ext.cnf"
openssl x509 -req -in "$CERTS/server.csr" -CA "$CERTS/ca.pem" -CAkey "$CERTS/ca.key" \
  -CAcreateserial -days 2 -extfile "$CERTS/ext.cnf" -out "$CERTS/server.pem" 2>/dev/null
# PKCS#8, the form every PEM key reader takes
openssl pkcs8 -topk8 -nocrypt -in "$CERTS/server.key" -out "$CERTS/server-pkcs8.key"

echo "== users file ($USER_NAME: PLAIN password and SCRAM-SHA-256/512 credentials)"
USERS="$OUT/users.json"
rm -f "$USERS"
printf '%s\n' "$USER_PASSWORD" | "$GATEWAY" users set-password --file "$USERS" "$USER_NAME"
for m in SCRAM-SHA-256 SCRAM-SHA-512; do
  printf '%s\n' "$USER_PASSWORD" | "$GATEWAY" users set-scram --file "$USERS" --mechanism "$m" "$USER_NAME"
done

P_PLAIN=$(free_port)
P_SSL=$(free_port)
P_SASL=$(free_port)
echo "== gateway: PLAINTEXT :$P_PLAIN, SSL :$P_SSL, SASL_SSL :$P_SASL"
# The store cap above what the two topics may hold (RETAIN per partition each). The SASL
# listener turns authorization on; this bench measures TLS and SASL, so topics are opened
# to every authenticated user (allow-everyone; the default is off).
env IGGY_KAFKA_DEFAULT_RETENTION_BYTES="$RETAIN" IGGY_KAFKA_MAX_CONNECTION_CREATION_RATE="$CONN_RATE" \
  IGGY_KAFKA_LISTENERS="PLAINTEXT://127.0.0.1:$P_PLAIN,SSL://127.0.0.1:$P_SSL,SASL_SSL://127.0.0.1:$P_SASL" \
  IGGY_KAFKA_TLS_CERT_FILE="$CERTS/server.pem" IGGY_KAFKA_TLS_KEY_FILE="$CERTS/server-pkcs8.key" \
  IGGY_KAFKA_SASL_USERS_FILE="$USERS" IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES=$((3 * RETAIN * PARTITIONS + (1 << 30))) \
  IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND=true \
  RUST_LOG=warn "$GATEWAY" >"$OUT/gateway.stdout" 2>"$OUT/gateway.stderr" &
GPID=$!
for port in "$P_PLAIN" "$P_SSL" "$P_SASL"; do
  wait_listening "$port" "$GPID" "$OUT/gateway.stderr"
done

echo "== produce ${DUR}s and consume, 1 KiB records, $PARTITIONS partition(s), $PRODUCERS producer(s), $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  produce_consume plaintext "$P_PLAIN" "$GPID" "$round"
  produce_consume ssl "$P_SSL" "$GPID" "$round" --security-protocol ssl --ssl-ca-location "$CERTS/ca.pem"
done

echo "== SASL_SSL authentications, $AUTH_WORKERS workers, ${AUTH_SECS}s each"
export KAFKA_BENCH_SASL_USERNAME="$USER_NAME" KAFKA_BENCH_SASL_PASSWORD="$USER_PASSWORD"
for m in SCRAM-SHA-256 SCRAM-SHA-512 PLAIN; do
  "$BENCH" auth --bootstrap "127.0.0.1:$P_SASL" --security-protocol sasl_ssl \
    --sasl-mechanism "$m" --ssl-ca-location "$CERTS/ca.pem" --workers "$AUTH_WORKERS" \
    --duration "$AUTH_SECS" --gateway-pid "$GPID" --json "$OUT/auth-$m.json" \
    >"$OUT/auth-$m.txt" 2>"$OUT/auth-$m.err" || true
  echo "auth $m done"
done
cleanup

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def ok(j):
    return j is not None and j.get("errors", 0) == 0
def mean(xs):
    return sum(xs) / len(xs) if xs else None
print("| round | PLAINTEXT produce MB/s | SSL produce MB/s | ratio | PLAINTEXT consume MB/s | SSL consume MB/s | ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|")
totals = {k: [] for k in ("pp", "sp", "pc", "sc")}
for r in range(1, rounds + 1):
    row = []
    for mode in ("produce", "consume"):
        p, s = load(f"plaintext-{r}-{mode}.json"), load(f"ssl-{r}-{mode}.json")
        pm = p["mb_per_sec"] if ok(p) else None
        sm = s["mb_per_sec"] if ok(s) else None
        if pm is not None and sm is not None:
            totals["p" + mode[0]].append(pm)
            totals["s" + mode[0]].append(sm)
        f = lambda v: f"{v:.1f}" if v is not None else "fail"
        row += [f(pm), f(sm), f"{sm / pm:.2f}" if pm and sm is not None else "n/a"]
    print(f"| {r} | " + " | ".join(row) + " |")
def per_gb(j, which):
    if not ok(j) or not j.get("bytes"):
        return None
    v = j.get("client_cpu_secs") if which == "client" else (j.get("broker") or {}).get("cpu_secs_used")
    return v / (j["bytes"] / 1e9) if v is not None else None
print()
print("| round | mode | listener | MB/s | gateway CPU s/GB | client CPU s/GB |")
print("|---:|---|---|---:|---:|---:|")
for r in range(1, rounds + 1):
    for mode in ("produce", "consume"):
        for name in ("plaintext", "ssl"):
            j = load(f"{name}-{r}-{mode}.json")
            f = lambda v: f"{v:.2f}" if v is not None else "n/a"
            mb = f"{j['mb_per_sec']:.1f}" if ok(j) else "fail"
            print(f"| {r} | {mode} | {name.upper()} | {mb} | {f(per_gb(j, 'gateway'))} | {f(per_gb(j, 'client'))} |")
print()
for mode, key in (("produce", "p"), ("consume", "c")):
    p, s = mean(totals["p" + key]), mean(totals["s" + key])
    if p and s:
        verdict = "meets" if s / p >= 0.85 else "BELOW"
        print(f"SSL/PLAINTEXT {mode}: {s:.1f} / {p:.1f} MB/s = {s / p:.2f} ({verdict} the 0.85 goal)")
    else:
        print(f"SSL/PLAINTEXT {mode}: n/a (a run failed; see {out}/*.err)")
for m in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
    j = load(f"auth-{m}.json")
    if not j:
        print(f"auth {m}: fail (see {out}/auth-{m}.err)")
        continue
    c, s = j["connect_latency"], j["sasl_latency"]
    cpu = j.get("broker") and j["broker"].get("cpu_secs_used")
    print(f"auth SASL_SSL {m}: {j['auth_per_sec']:.0f}/s with {j['workers']} workers, "
          f"{j['authentications']} ok, {j['errors']} errors"
          f"{' (first: ' + j['first_error'] + ')' if j.get('first_error') else ''}; "
          f"connect+auth p50 {c['p50_us']/1e3:.2f} ms p99 {c['p99_us']/1e3:.2f} ms; "
          f"sasl p50 {s['p50_us']/1e3:.2f} ms p99 {s['p99_us']/1e3:.2f} ms; "
          f"gateway cpu {cpu if cpu is not None else 'n/a'} s, client cpu {j.get('client_cpu_secs') or 0:.1f} s")
EOF
