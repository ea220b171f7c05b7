#!/usr/bin/env bash
# Capture real Kafka client request frames as byte fixtures.
#
#   bash scripts/install-clients.sh              # once: clients + Tansu into .clients/
#   bash tools/fixture-capture/capture.sh [CLIENT...]
#
# CLIENT: librdkafka-2.0.2 librdkafka-2.16 kafka-python-3.0.12 kafkajs-2.2.4 java-3.9.1
# (default: all). For each client: start a fresh Tansu broker (in-memory) and the recording
# proxy on free 127.0.0.1 ports (Tansu advertises the proxy's port, so every connection goes
# through it), run the client script, stop both. The client's folder under
# fixtures/requests/ is replaced; its frames.txt lists every request frame the client sent,
# in order, and which file kept it. Then extract_batches.py rebuilds fixtures/record-batches/
# from the captured Produce requests and verify_batches.py checks every .bin/.json pair.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tools/fixture-capture"
C="$ROOT/.clients"
REQ="$ROOT/fixtures/requests"
BATCHES="$ROOT/fixtures/record-batches"
ALL=(librdkafka-2.0.2 librdkafka-2.16 kafka-python-3.0.12 kafkajs-2.2.4 java-3.9.1)
CLIENTS=("$@")
((${#CLIENTS[@]})) || CLIENTS=("${ALL[@]}")

[[ -x "$C/tansu/tansu" && -x "$C/venv/bin/python" ]] || {
  echo "clients missing: run scripts/install-clients.sh first" >&2; exit 1; }

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
mkdir -p "$WORK/sent" "$WORK/logs"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { # $1 port
  for _ in $(seq 100); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "port $1 did not open" >&2; return 1
}

run_client() { # $1 client name, $2 bootstrap
  export SENT_FILE="$WORK/sent/$1.json"
  case "$1" in
    librdkafka-2.0.2) bash "$HERE/capture_kcat.sh" "$2" ;;
    librdkafka-2.16) (cd "$HERE" && "$C/venv/bin/python" capture_confluent.py "$2") ;;
    kafka-python-3.0.12) (cd "$HERE" && "$C/venv/bin/python" capture_kafka_python.py "$2") ;;
    kafkajs-2.2.4) NODE_PATH="$C/node/node_modules" node "$HERE/capture_kafkajs.js" "$2" ;;
    java-3.9.1) java -cp "$C/java/jars/*" "$HERE/JavaCapture.java" "$2" "$SENT_FILE" ;;
    *) echo "unknown client $1" >&2; return 2 ;;
  esac
}

export -f run_client
export HERE C WORK
status=0
for client in "${CLIENTS[@]}"; do
  tport="$(free_port)"; pport="$(free_port)"
  while [[ "$pport" == "$tport" ]]; do pport="$(free_port)"; done
  "$C/tansu/tansu" broker --listener-url "tcp://127.0.0.1:$tport" \
    --advertised-listener-url "tcp://127.0.0.1:$pport" --storage-engine memory://tansu/ \
    >"$WORK/logs/$client-tansu.log" 2>&1 &
  tpid=$!; PIDS+=("$tpid")
  wait_port "$tport"
  rm -rf "${REQ:?}/$client"
  extra=()
  [[ "$client" == librdkafka-2.0.2 ]] && extra=(--strip-apiversions-tags)
  python3 "$HERE/record_proxy.py" --listen-port "$pport" --upstream-port "$tport" \
    --out "$REQ" --client "$client" --log "$REQ/$client/frames.txt" "${extra[@]}" \
    >"$WORK/logs/$client-proxy.log" 2>&1 &
  ppid_=$!; PIDS+=("$ppid_")
  wait_port "$pport"
  echo "=== $client (tansu :$tport, proxy :$pport)"
  if timeout 180 bash -c 'run_client "$0" "$1"' "$client" "127.0.0.1:$pport" \
      >"$WORK/logs/$client-client.log" 2>&1; then
    echo "    client ok"
  else
    echo "    client FAILED (exit $?), see below"; status=1
  fi
  sed 's/^/    | /' "$WORK/logs/$client-client.log" | tail -25
  kill "$ppid_" "$tpid"; wait "$ppid_" "$tpid" 2>/dev/null || true
  echo "    frames seen: $(wc -l <"$REQ/$client/frames.txt"), kept: $(ls "$REQ/$client" | grep -c -- '-v[0-9]*\.bin$')"
done

"$C/venv/bin/python" "$HERE/extract_batches.py" --requests "$REQ" --sent "$WORK/sent" \
  --out "$BATCHES" "${CLIENTS[@]}" || status=1
"$C/venv/bin/python" "$HERE/verify_batches.py" "$BATCHES" || status=1
echo "logs: $WORK/logs"
trap - EXIT
cleanup
exit "$status"
