"""Shared bits of the Python fixture-capture clients: the records every client sends,
and the "sent" manifest each client script writes (what it produced, to which partition,
with which codec) that extract_batches.py turns into fixtures/record-batches/*.json.

Every client sends, per codec, one batch of five records to partition 1 and one record
to partition 2 of its own topic (3 partitions):
  1. key, value, headers with a repeated name ("h" twice) and a third header
  2. null key
  3. null value, one header with a null value
  4. empty value ("")
  5. key, longer value, headers "h" and one with an empty value
  (partition 2) 6. key, value, no headers
"""
import json
import os

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TOPIC_PARTITIONS = 3
MAIN_PARTITION = 1
OTHER_PARTITION = 2


def records(codec, null_header_values=True):
    """[(partition, key, value, [(name, value)])]; keys/values/header values bytes or None.

    null_header_values=False drops headers whose value is null (kafka-python's send()
    refuses them: "All headers items must be (str, bytes) tuples")."""
    c = codec.encode()
    recs = [
        (MAIN_PARTITION, b"key-1", b"value-1 " + c + b" the quick brown fox",
         [("h", b"one"), ("h", b"two"), ("trace-id", b"0af7651916cd43dd")]),
        (MAIN_PARTITION, None, b"value-2 " + c + b" no key", []),
        (MAIN_PARTITION, b"key-3", None, [("nullable", None)]),
        (MAIN_PARTITION, b"key-4", b"", []),
        (MAIN_PARTITION, b"key-5", b"value-5 " + c + b" " + b"abc" * 8,
         [("h", b"one"), ("empty", b"")]),
        (OTHER_PARTITION, b"key-6", b"value-6 " + c + b" other partition", []),
    ]
    if not null_header_values:
        recs = [(p, k, v, [(n, hv) for n, hv in hs if hv is not None]) for p, k, v, hs in recs]
    return recs


def _hex(b):
    return None if b is None else b.hex()


class Manifest:
    def __init__(self, client, client_version, topic):
        self.data = {"client": client, "client_version": client_version, "topic": topic,
                     "sent": []}

    def add(self, codec, partition, key, value, headers):
        """Record one produced record (call it in send order)."""
        for entry in self.data["sent"]:
            if entry["codec"] == codec and entry["partition"] == partition:
                break
        else:
            entry = {"codec": codec, "partition": partition, "records": []}
            self.data["sent"].append(entry)
        entry["records"].append({"key": _hex(key), "value": _hex(value),
                                 "headers": [[n, _hex(v)] for n, v in headers]})

    def write(self, path=None):
        path = path or os.environ["SENT_FILE"]
        with open(path, "w") as f:
            json.dump(self.data, f, indent=1)
