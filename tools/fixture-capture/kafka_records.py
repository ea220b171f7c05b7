"""Small, independent decoder of Kafka record batches (magic 2), for checking fixtures.

Written from the protocol description (shared PROTOCOL_NOTES.md / Kafka's DefaultRecordBatch
layout), not from any client's code. Decompression uses the Python libraries installed in
.clients/venv (gzip from the stdlib, cramjam for snappy, lz4.frame, zstandard); the CRC-32C is
checked with the crc32c package.
"""
import gzip
import struct

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _varint(buf, pos):
    """zigzag varint / varlong"""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos


def _bytes(buf, pos):
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    return bytes(buf[pos:pos + n]), pos + n


def decompress(codec, data):
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    if codec == 2:
        import cramjam
        if data.startswith(XERIAL_MAGIC):  # xerial framing: magic, version, compat, [len][block]...
            pos, out = 16, bytearray()
            while pos < len(data):
                (n,) = struct.unpack_from(">I", data, pos)
                pos += 4
                out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + n]))
                pos += n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        import lz4.frame
        return lz4.frame.decompress(data)
    if codec == 4:
        import zstandard
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise ValueError(f"unknown codec {codec}")


def decode_batches(buf):
    """Decode all record batches in buf. Returns a list of dicts:
    {base_offset, codec, codec_name, attributes, producer_id, producer_epoch, base_sequence,
     crc_ok, compressed_size, records: [{key, value, headers: [(name, value)], offset_delta,
     timestamp_delta}]}"""
    import crc32c
    out, pos = [], 0
    while pos < len(buf):
        if len(buf) - pos < 61:
            raise ValueError(f"trailing {len(buf) - pos} bytes at {pos}")
        base_offset, batch_len, _epoch, magic, crc = struct.unpack_from(">qiibI", buf, pos)
        if magic != 2:
            raise ValueError(f"magic {magic} at {pos}")
        end = pos + 12 + batch_len
        if end > len(buf):
            raise ValueError("batch runs past the end")
        crc_ok = crc32c.crc32c(bytes(buf[pos + 21:end])) == crc
        (attributes, last_offset_delta, base_ts, max_ts, pid, pepoch, bseq, count) = \
            struct.unpack_from(">hiqqqhii", buf, pos + 21)
        codec = attributes & 7
        body = decompress(codec, bytes(buf[pos + 61:end]))
        records, rp = [], 0
        for _ in range(count):
            length, rp = _varint(body, rp)
            rend = rp + length
            rp += 1  # attributes
            ts_delta, rp = _varint(body, rp)
            off_delta, rp = _varint(body, rp)
            key, rp = _bytes(body, rp)
            value, rp = _bytes(body, rp)
            nh, rp = _varint(body, rp)
            headers = []
            for _ in range(nh):
                name, rp = _bytes(body, rp)
                hv, rp = _bytes(body, rp)
                headers.append((name.decode("utf-8"), hv))
            if rp != rend:
                raise ValueError(f"record length mismatch ({rp} != {rend})")
            records.append({"key": key, "value": value, "headers": headers,
                            "offset_delta": off_delta, "timestamp_delta": ts_delta})
        if rp != len(body):
            raise ValueError(f"{len(body) - rp} bytes after the last record")
        out.append({"base_offset": base_offset, "codec": codec, "codec_name": CODEC_NAMES[codec],
                    "attributes": attributes, "producer_id": pid, "producer_epoch": pepoch,
                    "base_sequence": bseq, "crc_ok": crc_ok, "compressed_size": end - pos - 61,
                    "last_offset_delta": last_offset_delta, "records": records})
        pos = end
    return out
