#!/usr/bin/env python3
"""Check every fixtures/record-batches/<name>.bin against <name>.json with the independent
decoder in kafka_records.py: CRC-32C, codec bits, and each record's key, value and headers
in order. Prints one line per pair and 'N passed, N failed'."""
import glob
import json
import os
import sys

from kafka_records import decode_batches


def hx(b):
    return None if b is None else b.hex()


def check(stem):
    with open(stem + ".json") as f:
        want = json.load(f)
    with open(stem + ".bin", "rb") as f:
        batches = decode_batches(f.read())
    problems = []
    if not all(b["crc_ok"] for b in batches):
        problems.append("bad CRC")
    codecs = {b["codec_name"] for b in batches}
    if codecs != {want["codec"]}:
        problems.append(f"codec {codecs} != {want['codec']}")
    got = [{"key": hx(r["key"]), "value": hx(r["value"]),
            "headers": [[n, hx(v)] for n, v in r["headers"]]}
           for b in batches for r in b["records"]]
    if got != want["records"]:
        problems.append(f"records differ:\n  decoded {got}\n  json    {want['records']}")
    return problems, sum(len(b["records"]) for b in batches), len(batches)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "fixtures", "record-batches")
    passed = failed = 0
    for js in sorted(glob.glob(os.path.join(d, "*.json"))):
        stem = js[:-5]
        try:
            problems, n, nb = check(stem)
        except Exception as e:  # noqa: BLE001
            problems, n, nb = [f"decode error: {e!r}"], 0, 0
        name = os.path.basename(stem)
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            passed += 1
            print(f"ok   {name}: {n} records in {nb} batch(es)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
