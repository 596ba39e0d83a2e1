"""Artifact references: short, content-addressed, validated hex ids."""

from __future__ import annotations

import hashlib
import re

__all__ = ["REF_LENGTH", "content_digest", "is_ref", "make_ref", "validate_ref"]

REF_LENGTH = 12
"""Hex characters in a ref (48 bits: collisions are negligible within one thread)."""
_REF = re.compile(rf"^[0-9a-f]{{{REF_LENGTH}}}$")


def content_digest(data: bytes | str) -> str:
    """Full sha256 hex digest of the payload (str encoded as UTF-8, lone surrogates kept)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def make_ref(data: bytes | str) -> str:
    """The ref of a payload: the first `REF_LENGTH` hex characters of its sha256."""
    return content_digest(data)[:REF_LENGTH]


def is_ref(value: object) -> bool:
    """True when `value` is a well-formed ref."""
    return isinstance(value, str) and _REF.fullmatch(value) is not None


def validate_ref(value: object) -> str:
    """Return `value` as a ref, stripped and lower-cased.

    Raises:
        ValueError: when it is not `REF_LENGTH` hex characters.
    """
    if isinstance(value, str):
        candidate = value.strip().strip("\"'").lower()
        if _REF.fullmatch(candidate):
            return candidate
    raise ValueError(f"not a valid artifact ref: {value!r} (expected {REF_LENGTH} hex characters)")
