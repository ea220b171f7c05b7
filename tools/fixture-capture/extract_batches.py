#!/usr/bin/env python3
"""Pull record batches out of captured Produce requests.

For each client folder fixtures/requests/<client>/ and each codec found in its Produce
requests, take the partition entry with the most records (first such on a tie) and write
  <out>/<client>-<codec>.bin   the raw `records` bytes of that partition
  <out>/<client>-<codec>.json  {"client", "client_version", "codec", "records": [...]}
The JSON's records come from the client script's "sent" manifest (what the script produced
to that partition with that codec, in order), not from decoding the bytes; the counts must
agree or the pair is not written. verify_batches.py then decodes the .bin independently.
"""
import argparse
import glob
import json
import os
import sys

from kafka_records import decode_batches
from produce_request import parse_produce


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", required=True)
    ap.add_argument("--sent", required=True, help="folder of <client>.json sent manifests")
    ap.add_argument("--out", required=True)
    ap.add_argument("clients", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    clients = a.clients or sorted(os.listdir(a.requests))
    failed = False
    for client in clients:
        sent_path = os.path.join(a.sent, f"{client}.json")
        if not os.path.exists(sent_path):
            print(f"{client}: no sent manifest, skipped", file=sys.stderr)
            failed = True
            continue
        with open(sent_path) as f:
            sent = json.load(f)
        best = {}  # codec -> (count, file, partition, records bytes)
        files = sorted(p for p in glob.glob(os.path.join(a.requests, client, "*-Produce-v*.bin"))
                       if not p.endswith("-response.bin"))
        for path in files:
            with open(path, "rb") as f:
                _v, _cid, parts = parse_produce(f.read())
            for topic, partition, records in parts:
                if not records or topic != sent["topic"]:
                    continue
                batches = decode_batches(records)
                codecs = {b["codec_name"] for b in batches}
                if len(codecs) != 1:
                    print(f"{path}: partition {partition} mixes codecs {codecs}", file=sys.stderr)
                    continue
                codec = codecs.pop()
                n = sum(len(b["records"]) for b in batches)
                if codec not in best or n > best[codec][0]:
                    best[codec] = (n, path, partition, records)
        for old in glob.glob(os.path.join(a.out, f"{client}-*")):
            os.remove(old)
        for codec, (n, path, partition, records) in sorted(best.items()):
            entry = next((e for e in sent["sent"]
                          if e["codec"] == codec and e["partition"] == partition), None)
            if entry is None or len(entry["records"]) != n:
                print(f"{client} {codec}: {os.path.basename(path)} partition {partition} has {n} "
                      f"records, the script sent {len(entry['records']) if entry else 0}: skipped",
                      file=sys.stderr)
                failed = True
                continue
            stem = os.path.join(a.out, f"{client}-{codec}")
            with open(stem + ".bin", "wb") as f:
                f.write(records)
            with open(stem + ".json", "w") as f:
                json.dump({"client": client, "client_version": sent["client_version"],
                           "codec": codec, "records": entry["records"]}, f, indent=1)
                f.write("\n")
            print(f"{client}-{codec}: {n} records, {len(records)} bytes, "
                  f"from {client}/{os.path.basename(path)} partition {partition}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
