"""Parse a captured Produce request frame (header + body, no size prefix) far enough to get
each partition's records bytes. Versions 0-12 (v13 topic ids: topic given as its uuid hex)."""
import struct

FLEXIBLE_FROM = 9


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise ValueError("short frame")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self):
        shift = v = 0
        while True:
            b = self.take(1)[0]
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7

    def string(self):  # int16 length, nullable
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def compact_string(self):
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def bytes32(self):
        n = self.i32()
        return None if n < 0 else self.take(n)

    def compact_bytes(self):
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1)

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def parse_produce(frame):
    """Returns (version, client_id, [(topic, partition, records_bytes)])."""
    r = Reader(frame)
    api_key, version, _corr = r.i16(), r.i16(), r.i32()
    if api_key != 0:
        raise ValueError(f"not a Produce request (api key {api_key})")
    flex = version >= FLEXIBLE_FROM
    client_id = r.string()  # always int16-length, even in header v2
    if flex:
        r.tags()
    if version >= 3:
        r.compact_string() if flex else r.string()  # transactional_id
    r.i16()  # acks
    r.i32()  # timeout_ms
    out = []
    ntopics = r.uvarint() - 1 if flex else r.i32()
    for _ in range(ntopics):
        if version >= 13:
            topic = r.take(16).hex()
        else:
            topic = r.compact_string() if flex else r.string()
        nparts = r.uvarint() - 1 if flex else r.i32()
        for _ in range(nparts):
            index = r.i32()
            records = r.compact_bytes() if flex else r.bytes32()
            if flex:
                r.tags()
            out.append((topic, index, records))
        if flex:
            r.tags()
    if flex:
        r.tags()
    if r.pos != len(frame):
        raise ValueError(f"{len(frame) - r.pos} unparsed bytes at the end")
    return version, client_id, out
