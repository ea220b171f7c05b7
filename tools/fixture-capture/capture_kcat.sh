#!/usr/bin/env bash
# Fixture capture client: kcat 1.7.1 on Debian's librdkafka 2.0.2.
# Usage: capture_kcat.sh BOOTSTRAP   (SENT_FILE env: where to write the sent manifest)
#
# kcat has no admin API: the topic is auto-created by the producer's Metadata request
# (Tansu makes 4 partitions). Per codec one kcat -P run (its own Produce request) to
# partition 1 with -z CODEC. kcat limits: every record of a run carries the same headers
# (-H h=one -H h=two -H nullable: a repeated name and a null value); -K '|' gives keys
# (a line without '|' has a null key); -Z turns an empty value into NULL, so kcat cannot
# send an empty (non-null) value in the same run -- that record is left out.
# Then a balanced consumer (-G group) reads from the beginning and exits at the end (-e);
# with auto commit on, librdkafka commits on close.
set -euo pipefail
BOOTSTRAP="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOPIC=fixtures-librdkafka-2-0-2
KCAT=(kcat -b "$BOOTSTRAP" -X client.id=fixture-capture-kcat)

# metadata first (also shows the broker answers)
"${KCAT[@]}" -L -t "$TOPIC" >/dev/null 2>&1 || true

lines() { # $1 = codec; kcat input lines, '|' separates key and value
  printf '%s\n' \
    "key-1|value-1 $1 the quick brown fox" \
    "value-2 $1 no key" \
    "key-3|" \
    "key-5|value-5 $1 $(printf 'abc%.0s' 1 2 3 4 5 6 7 8)"
}

for codec in none gzip snappy lz4 zstd; do
  lines "$codec" | "${KCAT[@]}" -P -t "$TOPIC" -p 1 -z "$codec" -K '|' -Z \
    -H h=one -H h=two -H nullable -X linger.ms=200 -X topic.request.required.acks=-1
  echo "produced codec=$codec"
done

# the manifest: what kcat made of those lines (same parsing rules as kcat.c with -K '|' -Z);
# keep these lines in step with lines() above
python3 - "$TOPIC" "$(kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9.]*\) builtin.*/\1/p')" "$HERE" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
from common import Manifest
topic, rdk = sys.argv[1], sys.argv[2]
m = Manifest("librdkafka-2.0.2", rdk, topic)
headers = [("h", b"one"), ("h", b"two"), ("nullable", None)]
for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
    abc = "abc" * 8
    for line in [f"key-1|value-1 {codec} the quick brown fox", f"value-2 {codec} no key",
                 "key-3|", f"key-5|value-5 {codec} {abc}"]:
        b = line.encode()
        if b"|" in b:
            k, v = b.split(b"|", 1)
            k = k or None   # -Z: empty key -> NULL
            v = v or None   # -Z: empty value -> NULL
        else:
            k, v = None, b
        m.add(codec, 1, k, v, headers)
m.write()
PY

# consume with a group from the beginning (no committed offset + auto.offset.reset=earliest, so
# librdkafka asks OffsetFetch first); -e exits at the end of the partitions
"${KCAT[@]}" -G fixtures-librdkafka-2-0-2-group -e -q -X auto.offset.reset=earliest \
  -X enable.auto.commit=true -X auto.commit.interval.ms=200 -X heartbeat.interval.ms=300 \
  -f '%p:%o %k\n' "$TOPIC" | wc -l | sed 's/^/consumed /'
