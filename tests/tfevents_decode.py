#!/usr/bin/env python3
"""Decodes a TensorBoard event file as TensorBoard reads it, and checks its framing.

  tfevents_decode.py FILE

Compiles tests/proto/tensorboard_event.proto with protoc (Debian's protobuf-compiler) into a
temporary directory, parses every record with python3-protobuf, and checks both CRC-32C of
every record with python3-crc32c: the masked checksum of the 8 length bytes and of the data.
Prints one JSON object: {"file_version", "records", "scalars": {tag: [[step, value], ...]},
"tail_bytes"} where tail_bytes counts bytes after the last whole record (a run killed during
a write; 0 for a file that ends on a record).

Exits 1 naming the record when a checksum is wrong, the first event has no file_version
"brain.Event:2", a later event is not a summary of simple values, or a record does not parse;
2 when the tools are missing.
"""

import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "proto", "tensorboard_event.proto")


def fail(msg, code=1):
    print("tfevents_decode: " + msg, file=sys.stderr)
    sys.exit(code)


def masked_crc(data):
    import crc32c
    c = crc32c.crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def compile_schema(out_dir):
    try:
        subprocess.run(["protoc", "-I", os.path.dirname(PROTO), "--python_out=" + out_dir, PROTO],
                       check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        fail("protoc could not compile %s (install protobuf-compiler): %s" % (PROTO, e), 2)
    sys.path.insert(0, out_dir)
    return importlib.import_module("tensorboard_event_pb2")


def records(blob):
    """Yields (index, data) for every whole record; returns the bytes left after them."""
    at, i = 0, 0
    while len(blob) - at >= 12:
        (length,) = struct.unpack_from("<Q", blob, at)
        (len_crc,) = struct.unpack_from("<I", blob, at + 8)
        if masked_crc(blob[at:at + 8]) != len_crc:
            fail("record %d at byte %d: the length's CRC is wrong" % (i, at))
        end = at + 12 + length + 4
        if end > len(blob):
            break
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack_from("<I", blob, at + 12 + length)
        if masked_crc(data) != data_crc:
            fail("record %d at byte %d: the data's CRC is wrong" % (i, at))
        yield i, data
        at, i = end, i + 1
    records.tail = len(blob) - at


def main():
    if len(sys.argv) != 2:
        fail("usage: tfevents_decode.py FILE", 2)
    try:
        import crc32c  # noqa: F401
    except ImportError:
        fail("python3-crc32c is missing (apt-get install python3-crc32c)", 2)
    with open(sys.argv[1], "rb") as f:
        blob = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        pb = compile_schema(tmp)
        out = {"file_version": None, "records": 0, "scalars": {}}
        for i, data in records(blob):
            event = pb.Event()
            try:
                event.ParseFromString(data)
            except Exception as e:  # a DecodeError
                fail("record %d does not parse as an Event: %s" % (i, e))
            what = event.WhichOneof("what")
            if i == 0:
                if what != "file_version" or event.file_version != "brain.Event:2":
                    fail("record 0 is not the file_version event \"brain.Event:2\" (%s)" % what)
                out["file_version"] = event.file_version
            elif what != "summary" or not event.summary.value:
                fail("record %d is not a summary (%s)" % (i, what))
            else:
                for v in event.summary.value:
                    if v.WhichOneof("value") != "simple_value":
                        fail("record %d: value %r is not a simple_value" % (i, v.tag))
                    out["scalars"].setdefault(v.tag, []).append([event.step, v.simple_value])
            out["records"] = i + 1
        out["tail_bytes"] = getattr(records, "tail", len(blob))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
