#!/usr/bin/env python3
"""Recording TCP proxy for Kafka wire fixtures.

Listens on 127.0.0.1:<listen-port>, forwards every connection to 127.0.0.1:<upstream-port>
and, for every Kafka request frame a client sends, saves the frame WITHOUT its 4-byte size
prefix (request header + body) as

    <out>/<client>/<seq:03>-<ApiName>-v<version>.bin

seq counts kept frames of this proxy run (one run = one client). Dedup: at most --keep
frames per (api key, version); every Produce frame is kept. The response that belongs to a
kept request (matched by correlation id on the same connection) is saved next to it as
<...>-response.bin (again without size prefix). acks=0 Produce requests get no response.

Bytes are forwarded unchanged, frame by frame. Standard library only.
"""
import argparse
import asyncio
import os
import struct
import sys

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 4: "LeaderAndIsr",
    5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
    32: "DescribeConfigs", 33: "AlterConfigs", 34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 47: "OffsetDelete", 48: "DescribeClientQuotas",
    49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 55: "DescribeQuorum", 57: "UpdateFeatures",
    60: "DescribeCluster", 61: "DescribeProducers", 64: "DescribeTransactions",
    65: "ListTransactions", 66: "AllocateProducerIds", 68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe", 71: "GetTelemetrySubscriptions", 72: "PushTelemetry",
    74: "ListClientMetricsResources", 75: "DescribeTopicPartitions",
}
PRODUCE = 0
MAX_FRAME = 64 * 1024 * 1024


class Recorder:
    def __init__(self, out_dir, keep):
        self.out_dir = out_dir
        self.keep = keep
        self.seq = 0
        self.counts = {}
        self.log = []
        os.makedirs(out_dir, exist_ok=True)

    def request(self, frame):
        """Save a request frame if wanted; return the file stem or None."""
        if len(frame) < 8:
            return None
        api_key, api_version = struct.unpack(">hh", frame[:4])
        k = (api_key, api_version)
        n = self.counts.get(k, 0)
        self.counts[k] = n + 1
        name = API_NAMES.get(api_key, f"Api{api_key}")
        line = f"{len(self.log) + 1:3d}. {name} v{api_version} ({len(frame)} bytes)"
        if api_key != PRODUCE and n >= self.keep:
            self.log.append(line + " -- not kept (already have enough)")
            return None
        self.seq += 1
        stem = os.path.join(self.out_dir, f"{self.seq:03d}-{name}-v{api_version}")
        self.log.append(line + f" -> {os.path.basename(stem)}.bin")
        with open(stem + ".bin", "wb") as f:
            f.write(frame)
        return stem

    def response(self, stem, frame):
        with open(stem + "-response.bin", "wb") as f:
            f.write(frame)


def _uvarint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _skip_tags(buf, pos):
    n, pos = _uvarint(buf, pos)
    for _ in range(n):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def strip_apiversions_tags(frame):
    """ApiVersions v3+ response (header v0): drop the body's top-level tagged fields.

    librdkafka 2.0.2 cannot parse an ApiVersions v3 response whose top-level tagged
    section carries fields (even default-valued ones, which Tansu 0.6.0 writes), so for
    that client the proxy forwards the response without them. The saved -response.bin
    stays Tansu's original bytes.
    """
    pos = 4 + 2  # correlation id, error code
    n, pos = _uvarint(frame, pos)
    for _ in range(max(n - 1, 0)):
        pos += 6
        pos = _skip_tags(frame, pos)
    pos += 4  # throttle_time_ms
    end = _skip_tags(frame, pos)
    if end != len(frame):
        return frame  # not what we expected: forward unchanged
    return frame[:pos] + b"\x00"


async def read_frame(reader):
    head = await reader.readexactly(4)
    (size,) = struct.unpack(">i", head)
    if size < 0 or size > MAX_FRAME:
        raise ValueError(f"bad frame size {size}")
    return head, await reader.readexactly(size)


async def pump_requests(creader, uwriter, rec, pending, strip):
    try:
        while True:
            head, frame = await read_frame(creader)
            stem = rec.request(frame)
            api_key, api_version, corr = struct.unpack(">hhi", frame[:8])
            fix = strip and api_key == 18 and api_version >= 3
            if stem is not None or fix:
                pending[corr] = (stem, fix)
            uwriter.write(head + frame)
            await uwriter.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        try:
            uwriter.write_eof()
        except (OSError, RuntimeError):
            uwriter.close()


async def pump_responses(ureader, cwriter, rec, pending):
    try:
        while True:
            head, frame = await read_frame(ureader)
            if len(frame) >= 4:
                (corr,) = struct.unpack(">i", frame[:4])
                stem, fix = pending.pop(corr, (None, False))
                if stem is not None:
                    rec.response(stem, frame)
                if fix:
                    frame = strip_apiversions_tags(frame)
                    head = struct.pack(">i", len(frame))
            cwriter.write(head + frame)
            await cwriter.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        cwriter.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen-port", type=int, required=True)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--out", required=True, help="fixtures/requests")
    ap.add_argument("--client", required=True, help="folder name, e.g. java-3.9.1")
    ap.add_argument("--keep", type=int, default=3, help="frames kept per (api, version); Produce: all")
    ap.add_argument("--strip-apiversions-tags", action="store_true",
                    help="forward ApiVersions v3+ responses without top-level tagged fields "
                         "(for librdkafka < 2.1, which cannot parse them)")
    ap.add_argument("--log", help="write the list of every request frame seen (in arrival order) to this file")
    args = ap.parse_args()

    rec = Recorder(os.path.join(args.out, args.client), args.keep)

    async def handle(creader, cwriter):
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", args.upstream_port)
        except OSError as e:
            print(f"record_proxy: upstream connect failed: {e}", file=sys.stderr)
            cwriter.close()
            return
        pending = {}
        await asyncio.gather(
            pump_requests(creader, uwriter, rec, pending, args.strip_apiversions_tags),
            pump_responses(ureader, cwriter, rec, pending),
        )

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen_port)
    print(f"record_proxy: 127.0.0.1:{args.listen_port} -> 127.0.0.1:{args.upstream_port}, "
          f"client {args.client}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    async with server:
        await stop.wait()
    if args.log:
        with open(args.log, "w") as f:
            f.write("\n".join(rec.log) + "\n")
    print(f"record_proxy: {args.client}: {len(rec.log)} request frames seen, {rec.seq} kept",
          file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
