# Shared by security-bench.sh and authz-bench.sh (sourced, not run).
#
# wait_listening PORT PID LOG: waits up to 15 s until 127.0.0.1:PORT accepts; exits the
# script with LOG on stderr when the process PID ends first or the time runs out.
#
# produce_consume NAME PORT PID ROUND [client options...]: one produce run of DUR seconds
# to topic bench-NAME, then one consume of what the topic holds, each sampling the
# gateway PID; results in $OUT/NAME-ROUND-{produce,consume}.{json,txt,err}. Reads BENCH,
# OUT, DUR, PARTITIONS, PRODUCERS and, with these defaults, RECORD_SIZE (1024),
# LINGER_MS (5) and BATCH_SIZE (1000000).

wait_listening() {
  local port=$1 pid=$2 log=$3 up=0
  for _ in $(seq 150); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  ((up)) || { echo "gateway did not listen on $port:" >&2; cat "$log" >&2; exit 1; }
}

produce_consume() {
  local name=$1 port=$2 gpid=$3 round=$4
  shift 4
  local topic="bench-$name"
  "$BENCH" produce --bootstrap "127.0.0.1:$port" "$@" --topic "$topic" \
    --partitions "$PARTITIONS" --producers "$PRODUCERS" --record-size "${RECORD_SIZE:-1024}" \
    --duration "$DUR" --acks all --codec none --linger-ms "${LINGER_MS:-5}" \
    --batch-size "${BATCH_SIZE:-1000000}" \
    --gateway-pid "$gpid" --timeout 300 --json "$OUT/$name-$round-produce.json" \
    >"$OUT/$name-$round-produce.txt" 2>"$OUT/$name-$round-produce.err" || true
  # A prefetch queue that holds the topic: with librdkafka's default cap (64 MiB) the
  # fetcher pauses whenever the queue fills, which the faster runs hit most, so the
  # client's back-off, not the gateway, would set the consume pace.
  "$BENCH" consume --bootstrap "127.0.0.1:$port" "$@" --topic "$topic" \
    --consumers "$PRODUCERS" -X queued.min.messages=1000000 -X queued.max.messages.kbytes=1048576 \
    --gateway-pid "$gpid" --timeout 300 --json "$OUT/$name-$round-consume.json" \
    >"$OUT/$name-$round-consume.txt" 2>"$OUT/$name-$round-consume.err" || true
  echo "$name round $round done"
}
