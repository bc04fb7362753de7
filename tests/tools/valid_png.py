#!/usr/bin/env python3
"""valid_png.py FILE - checks that a plotting tool wrote a real PNG: the signature, every chunk's
CRC, IHDR first and IEND last, image data, and at least 400 x 300 pixels. Prints the size, or one
assertion message and exits 1. Shared by the tests of tools/plot_*.py."""
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
pos, chunks = 8, []
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind}"
    chunks.append((kind, body))
    pos += 12 + n
assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", "IHDR/IEND misplaced"
w, h = struct.unpack(">II", chunks[0][1][:8])
assert w >= 400 and h >= 300, f"{w} x {h} pixels"
assert any(k == b"IDAT" for k, _ in chunks), "no image data"
print(f"{w} x {h} pixels, {len(data)} bytes")
