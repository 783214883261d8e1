"""Reads a W&B offline run file (``run-<id>.wandb``) back, for the tracking tests.

The format is LevelDB's log format behind a 7-byte W&B header (``:W&B``, magic 0xBEE1,
version 0): 32 KiB blocks of chunks, each ``crc32c(4) length(2, little-endian) type(1)``
then the payload, type 1 = a whole record, 2/3/4 = first/middle/last piece of one; a block
tail shorter than a chunk header is zero padding. Each record is a ``wandb.proto``
``Record`` protobuf (wandb 0.31 reads these files in its Go core only, so the test has
its own reader).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    out, pos, pieces = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        payload = data[pos + HEADER: pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        if kind == FULL:
            pieces = payload
        elif kind == FIRST:
            pieces = payload
            continue
        elif kind == MIDDLE:
            pieces += payload
            continue
        elif kind == LAST:
            pieces += payload
        record = pb.Record()
        record.ParseFromString(pieces)
        out.append(record)
    return out


def history(path: Path) -> list[dict[str, Any]]:
    """Every ``run.log`` row of the file, with its ``_step``."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def config(path: Path) -> dict[str, Any]:
    """The run's config as the file's config records leave it."""
    out: dict[str, Any] = {}
    for record in records(path):
        if record.WhichOneof("record_type") == "config":
            for item in record.config.update:
                out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out


def files(path: Path) -> list[str]:
    """Paths the run saved (``run.save``)."""
    return [f.path for record in records(path) if record.WhichOneof("record_type") == "files"
            for f in record.files.files]
