#!/usr/bin/env bash
# Client suite body for kcat (sourced by kcat_librdkafka_2_0_2.sh and kcat_librdkafka_2_16.sh,
# which pick the librdkafka and set SUITE_NAME).
#
# Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX (unique per run).
# kcat has no admin API: the first produce run auto-creates the topic (the broker's default
# partition count), then `kcat -L` must list it. Per codec (none, gzip, snappy, lz4, zstd)
# several kcat -P runs send records to explicit partitions (kcat puts the same headers on every
# record of a run, so each run carries its own): keys, a null key, a null value (-Z), an empty
# value, headers with a repeated name, a null value and an empty value. Every partition is read
# back (-C -J, one partition at a time) from the beginning and from a given offset and compared
# byte for byte; offsets must be consecutive from 0. ListOffsets (-Q) earliest (-2), latest
# (-1) and by timestamp (kcat cannot set timestamps: the ones read back are used); a start
# offset by timestamp (-o s@ts) too. kcat cannot delete topics.
set -euo pipefail
: "${SUITE_NAME:?set by the wrapper}"
fail() { echo "FAIL: $*" >&2; exit 1; }
# CLIENT_SUITE_KEEP_GOING=1: report every mismatch, not only the first, and exit 1 at the end
FAILED=0
mismatch() {
  if [[ "${CLIENT_SUITE_KEEP_GOING:-}" == 1 ]]; then
    echo "FAIL (continuing): $*" >&2
    FAILED=$((FAILED + 1))
  else
    fail "$@"
  fi
}
step() { echo "[$(date +%H:%M:%S)] $*"; }
[[ -n "${BOOTSTRAP:-}" ]] || fail "BOOTSTRAP (host:port[,host:port...]) is not set"
PREFIX="${TOPIC_PREFIX:-clients-$$-$(date +%s)}"
TOPIC="$PREFIX-$SUITE_NAME"
KCAT=(kcat -b "$BOOTSTRAP" -X "client.id=clients-suite-$SUITE_NAME" -X socket.timeout.ms=20000)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
command -v python3 >/dev/null || fail "python3 is needed to compare records"
step "$SUITE_NAME: kcat $(kcat -V 2>&1 | sed -n 's/^Version \([0-9.]*\).*/\1/p' | head -1), librdkafka $(kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][0-9.]*\) builtin.*/\1/p' | head -1), bootstrap $BOOTSTRAP, topic $TOPIC"

# every kcat -P run logs what it sent to $WORK/sent.raw
produce() { # $1 partition, $2 codec, $3 key mode (K: "key|value" lines, N: no -K: null keys),
            # $4 Z (-Z: empty -> null) or -, then -H header args; stdin: lines
  local part="$1" codec="$2" keys="$3" z="$4"
  shift 4
  local args=(-P -t "$TOPIC" -p "$part" -z "$codec" -X linger.ms=5 -X topic.request.required.acks=-1
    -X message.send.max.retries=0)
  [[ "$keys" == K ]] && args+=(-K '|')
  [[ "$z" == Z ]] && args+=(-Z)
  local input
  input="$(cat)"
  local out
  if ! out="$(printf '%s\n' "$input" | "${KCAT[@]}" "${args[@]}" "$@" 2>&1)"; then
    fail "Produce codec=$codec partition $part: kcat failed: $out"
  fi
  if grep -qi 'error\|fail' <<<"$out"; then
    fail "Produce codec=$codec partition $part: $out"
  fi
  # expanded into $WORK/sent.jsonl by expand_sent (one python run for all)
  printf '%s %s %s %s %s\n' "$part" "$keys" "$z" "$(printf '%s' "$input" | base64 -w0)" \
    "$(printf '%s\n' "$@" | base64 -w0)" >>"$WORK/sent.raw"
}

expand_sent() { # what kcat made of the produced lines (kcat.c with -K '|' [-Z], -H name[=value])
  python3 - "$WORK/sent.raw" >"$WORK/sent.jsonl" <<'PY'
import base64, json, sys
for row in open(sys.argv[1]):
    part, keys, z, text, hargs = (row.split(" ") + [""])[:5]
    text = base64.b64decode(text).decode()
    hargs = [a for a in base64.b64decode(hargs.strip()).decode().split("\n") if a]
    headers = []
    for i in range(0, len(hargs), 2):
        assert hargs[i] == "-H", hargs
        name, eq, value = hargs[i + 1].partition("=")
        headers.append([name, value if eq else None])
    for line in text.split("\n"):
        if keys == "K" and "|" in line:
            k, v = line.split("|", 1)
            if z == "Z":
                k, v = (k or None), (v or None)
        else:
            k, v = None, line
            if z == "Z" and v == "":
                v = None
        print(json.dumps({"partition": int(part), "key": k, "value": v, "headers": headers}))
PY
}

metadata_partitions() { # prints the partition ids of $TOPIC in Metadata, one per line
  "${KCAT[@]}" -L -t "$TOPIC" -J 2>/dev/null | python3 -c '
import json, sys
topic = sys.argv[1]
md = json.load(sys.stdin)
for t in md.get("topics", []):
    if t["topic"] == topic and not t.get("error"):
        for p in t["partitions"]:
            print(p["partition"])' "$TOPIC"
}

# --- auto-create through a produce, then Metadata -------------------------------------
printf 'key-0|first record creates the topic\n' | produce 0 none K -
parts=()
for _ in $(seq 50); do
  mapfile -t parts < <(metadata_partitions || true)
  ((${#parts[@]})) && break
  sleep 0.2
done
((${#parts[@]})) || fail "Metadata (kcat -L) does not list $TOPIC after producing to it"
[[ "$(printf '%s\n' "${parts[@]}" | sort -n | tr '\n' ' ')" == "$(seq 0 $((${#parts[@]} - 1)) | tr '\n' ' ')" ]] ||
  fail "Metadata: partition ids of $TOPIC are ${parts[*]}"
NPARTS=${#parts[@]}
USE=$((NPARTS < 3 ? NPARTS : 3))
step "auto-created: metadata lists $TOPIC with $NPARTS partition(s); using $USE"

# --- produce ----------------------------------------------------------------------------
i=0
for codec in none gzip snappy lz4 zstd; do
  main=$((i % USE))
  other=$(((i + 1) % USE))
  abc="$(printf 'abcdefgh%.0s' $(seq 1024))"
  # a line without the key delimiter has a null key
  printf '%s\n' "key-1|value-1 $codec the quick brown fox" "value-2 $codec no key" \
    "key-5|value-5 $codec $abc" |
    produce "$main" "$codec" K - -H h=one -H h=two -H trace-id=0af7651916cd43dd
  printf '%s\n' "key-3|" | produce "$main" "$codec" K Z -H nullable -H after-null=x -H h=three -H h=four
  printf '%s\n' "key-4|" | produce "$main" "$codec" K - -H empty= -H h=one
  printf '%s\n' "key-6|value-6 $codec other partition" | produce "$other" "$codec" K -
  step "produced codec=$codec"
  i=$((i + 1))
done

expand_sent

# --- read back, partition by partition ----------------------------------------------------
consume() { # $1 partition, $2 kcat -o argument; JSON lines to stdout
  "${KCAT[@]}" -C -t "$TOPIC" -p "$1" -o "$2" -e -J -q -X fetch.wait.max.ms=100 2>"$WORK/consume.err" ||
    fail "Consume partition $1 from $2: kcat failed: $(cat "$WORK/consume.err")"
}
compare() { # $1 where, $2 partition, $3 first offset expected, $4 file of kcat JSON lines
  python3 - "$1" "$2" "$3" "$WORK/sent.jsonl" "$4" <<'PY'
import json, sys
where, part, start, sent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
want = [r for r in map(json.loads, open(sent)) if r["partition"] == part][start:]
got = [json.loads(l) for l in open(sys.argv[5]) if l.strip()]
def fail(msg):
    print(f"FAIL: {where}: {msg}", file=sys.stderr)
    sys.exit(1)
if len(got) != len(want):
    fail(f"got {len(got)} records from offset {start}, expected {len(want)}: "
         f"offsets {[g['offset'] for g in got]}")
for i, (g, w) in enumerate(zip(got, want)):
    off = g["offset"]
    if off != start + i:
        fail(f"record #{i} has offset {off}, expected {start + i} (offsets must be consecutive)")
    if g.get("key") != w["key"]:
        fail(f"offset {off}: key {g.get('key')!r}, expected {w['key']!r}")
    if g.get("payload") != w["value"]:
        fail(f"offset {off}: value {g.get('payload')!r:.60}, expected {w['value']!r:.60} "
             f"(null and empty differ)")
    hs = g.get("headers", [])
    hs = [[hs[j], hs[j + 1]] for j in range(0, len(hs), 2)]
    if hs != w["headers"]:
        fail(f"offset {off}: headers {hs}, expected {w['headers']}")
    if g.get("tstype") != "create":
        fail(f"offset {off}: timestamp type {g.get('tstype')}, expected create")
PY
}
for ((p = 0; p < USE; p++)); do
  n="$(python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l)["partition"] == int(sys.argv[2])))' "$WORK/sent.jsonl" "$p")"
  consume "$p" beginning >"$WORK/p$p.jsonl"
  compare "partition $p from beginning" "$p" 0 "$WORK/p$p.jsonl" || mismatch "(see above)"
  mid=$((n / 2))
  consume "$p" "$mid" >"$WORK/p$p-from-$mid.jsonl"
  compare "partition $p from offset $mid" "$p" "$mid" "$WORK/p$p-from-$mid.jsonl" || mismatch "(see above)"
  step "partition $p: $n records read back from the beginning and from $mid"
done

# --- list offsets -------------------------------------------------------------------------
query() { # $1 partition, $2 timestamp (-1 latest, -2 earliest); prints the offset
  local out
  out="$("${KCAT[@]}" -Q -t "$TOPIC:$1:$2" 2>&1)" || fail "ListOffsets partition $1 timestamp $2: kcat failed: $out"
  sed -n "s/^$TOPIC \[$1\] offset \(-\?[0-9]\+\)\$/\1/p" <<<"$out" | head -1 | grep . ||
    fail "ListOffsets partition $1 timestamp $2: no offset in kcat output: $out"
}
for ((p = 0; p < USE; p++)); do
  n="$(wc -l <"$WORK/p$p.jsonl")"
  earliest="$(query "$p" -2)"
  latest="$(query "$p" -1)"
  got="$earliest/$latest"
  [[ "$got" == "0/$n" ]] || mismatch "ListOffsets partition $p: earliest/latest $got, expected 0/$n"
  # by timestamp: the first offset whose timestamp is >= the one asked for (-1: none)
  mapfile -t cases < <(python3 - "$WORK/p$p.jsonl" <<'PY'
import json, sys
ts = [json.loads(l)["ts"] for l in open(sys.argv[1]) if l.strip()]
def first_at_or_after(t):
    return next((i for i, x in enumerate(ts) if x >= t), -1)
k = len(ts) // 2
for t in [ts[k], ts[k] - 1, ts[0] - 5000, ts[-1], ts[-1] + 1]:
    print(t, first_at_or_after(t))
PY
)
  for c in "${cases[@]}"; do
    read -r ts want <<<"$c"
    got="$(query "$p" "$ts")"
    [[ "$got" == "$want" ]] || mismatch "ListOffsets partition $p timestamp $ts: offset $got, expected $want"
  done
  # consume from a timestamp (-o s@ts), which also goes through ListOffsets
  read -r ts want <<<"${cases[0]}"
  first="$("${KCAT[@]}" -C -t "$TOPIC" -p "$p" -o "s@$ts" -e -q -f '%o\n' 2>/dev/null | head -1)"
  [[ "$first" == "$want" ]] || mismatch "Consume partition $p from timestamp $ts: first offset '$first', expected $want"
done
step "ListOffsets: earliest, latest, by timestamp"
((FAILED == 0)) || fail "$SUITE_NAME: $FAILED check(s) failed (see above)"
echo "OK $SUITE_NAME"
