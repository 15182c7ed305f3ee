"""TFRecord files read record by record, every record accounted for: a corrupt record is a dead letter and the
records after it are still read.

A TFRecord frame is ``uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)``
(tensorflow/core/lib/io/record_writer.cc). TensorFlow's C++ reader checks both CRCs (``RandomRecordReader`` for an
uncompressed local file, 5 us a record here against 235-333 us through ``tf.data``; ``RecordIterator`` for a GZIP or
non-local file). When it reports a corrupt record:

- the length field still checks (its CRC is recomputed here: 8 bytes) -> only that record's data is bad: one dead
  letter, and reading goes on at the next frame;
- the length field does not check -> the framing is lost: the bytes are scanned for the next offset whose length
  field checks and whose record reads (numpy, 8 table steps over every offset of a chunk), one dead letter names the
  bytes skipped, and reading goes on there.

A GZIP or non-local file is first copied, decompressed, to a local temporary file (``shadow.read``).
"""

import os
import struct

import numpy as np

from paritygate.lazy import lazy_import

tf = lazy_import("tensorflow")

HEADER, FOOTER = 12, 4
SCAN_CHUNK = 1 << 20  # bytes scanned at a time for the next frame
_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = _table()
NP_TABLE = np.array(TABLE, np.uint32)


def masked_crc(data):
    """TFRecord's masked CRC-32C of ``data`` (record_writer.h MaskedCrc), in Python: for headers and the slow path."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def header_length(header):
    """The record length of a 12-byte header, or None when its CRC does not check."""
    if len(header) < HEADER:
        return None
    length, crc = struct.unpack("<QI", header[:HEADER])
    return length if masked_crc(header[:8]) == crc else None


def candidate_offsets(chunk):
    """Offsets i in ``chunk`` (bytes) where chunk[i:i+8] is followed by its masked CRC-32C: possible frame starts."""
    b = np.frombuffer(chunk, np.uint8)
    n = len(b) - HEADER + 1
    if n <= 0:
        return np.zeros(0, np.int64)
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    for j in range(8):
        crc = NP_TABLE[(crc ^ b[j:j + n]) & 0xFF] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(0xFFFFFFFF)
    masked = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)
    stored = (b[8:8 + n].astype(np.uint32) | (b[9:9 + n].astype(np.uint32) << 8)
              | (b[10:10 + n].astype(np.uint32) << 16) | (b[11:11 + n].astype(np.uint32) << 24))
    return np.flatnonzero(masked == stored)


class Corrupt(Exception):
    """A corrupt stretch of a TFRecord file: ``message`` says what, reading goes on at ``resume`` (None: the end)."""

    def __init__(self, message, resume):
        super().__init__(message)
        self.resume = resume


def _scan(read_at, start, size, fits, readable):
    """The first offset >= ``start`` where a frame's length checks, ``fits`` and ``readable(offset)`` holds."""
    offset = start
    while offset < size:
        chunk = read_at(offset, SCAN_CHUNK + HEADER - 1)
        for i in candidate_offsets(chunk):
            at = offset + int(i)
            length = struct.unpack("<Q", chunk[i:i + 8])[0]
            if fits(at, length) and readable(at):
                return at
        offset += SCAN_CHUNK
    return None


def local_records(path, size, limit):
    """(offset, record bytes | Corrupt) of an uncompressed local TFRecord file of ``size`` bytes. Each header is
    checked here before TensorFlow reads the record: a length that checks but runs past the file (or past
    ``limit`` bytes) would make it allocate that much (a 1 TB length crashes the process)."""
    from tensorflow.python.lib.io import _pywrap_record_io as record_io

    reader = record_io.RandomRecordReader(str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))

    def read_at(offset, n):
        return os.pread(fd, n, offset)

    def fits(offset, length):
        return length is not None and length <= limit and offset + HEADER + length + FOOTER <= size

    def readable(offset):
        try:
            reader.read(offset)
        except (tf.errors.OpError, IndexError):
            return False
        return True

    try:
        offset = 0
        while offset < size:
            if size - offset < HEADER + FOOTER:
                yield offset, Corrupt(f"{size - offset} trailing byte(s) at byte {offset} are not a whole record", None)
                return
            try:
                if not fits(offset, header_length(read_at(offset, HEADER))):
                    raise tf.errors.DataLossError(None, None, "header")
                raw, after = reader.read(offset)
            except tf.errors.OpError:
                error = _located(read_at, offset, size, fits, readable)
                yield offset, error
                if error.resume is None:
                    return
                offset = error.resume
                continue
            yield offset, raw
            offset = after
    finally:
        os.close(fd)


def _located(read_at, offset, size, fits, readable):
    """The Corrupt error of the frame at ``offset``: its data only (the length checks), or lost framing."""
    length = header_length(read_at(offset, HEADER))
    if fits(offset, length):
        return Corrupt(f"the record at byte {offset} ({length} bytes) fails its data CRC: not read",
                       offset + HEADER + length + FOOTER)
    found = _scan(read_at, offset + 1, size, fits, readable)
    where = f"the next record at byte {found}" if found is not None else "the end of the file"
    why = ("fails its CRC" if length is None else
           f"declares a record of {length} bytes, more than the {size - offset - HEADER - FOOTER} left in the file "
           "or the limit")
    return Corrupt(f"the record header at byte {offset} {why}: {(found if found is not None else size) - offset} "
                   f"bytes skipped up to {where}", found)
