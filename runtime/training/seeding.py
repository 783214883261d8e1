"""Seeds derived from (seed, step, rank, ...) so that randomness survives a resume.

Per-rank RNG states saved in a checkpoint do not map onto a different world size. Deriving
every seed from the run seed and the global position instead makes dropout, augmentation
and shuffling a pure function of where the run is, whatever happened before.
"""

from __future__ import annotations

import hashlib
import struct


def derive_seed(seed: int, *parts: int) -> int:
    """A well-mixed 63-bit seed for ``(seed, *parts)``; stable across runs and platforms."""
    packed = struct.pack(f"<{1 + len(parts)}q", seed, *parts)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "little") >> 1
