"""The `o200k_base` and `cl100k_base` tiktoken encodings, shipped as package data.

The rank files are OpenAI's published ones (see `NOTICE.md` beside this module). They are
checked against the SHA-256 that tiktoken itself checks, parsed in tiktoken's `.tiktoken`
format and turned into a `tiktoken.Encoding` with the split pattern and special tokens that
`tiktoken_ext.openai_public` gives these encodings, so counts equal `tiktoken.get_encoding`.

Part `_encodings` of the core (docs/architecture.md). May import: no other part;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = ["BUNDLED", "BundledEncoding", "load_bundled", "read_ranks"]

logger = logging.getLogger(__name__)

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


@dataclass(frozen=True, slots=True)
class BundledEncoding:
    """One shipped encoding: its file, the hash tiktoken checks, its pattern and specials."""

    name: str
    filename: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


BUNDLED: dict[str, BundledEncoding] = {
    "o200k_base": BundledEncoding(
        name="o200k_base",
        filename="o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PATTERN,
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    "cl100k_base": BundledEncoding(
        name="cl100k_base",
        filename="cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PATTERN,
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}
"""The encodings shipped with the package, by tiktoken name."""

_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()


def read_ranks(name: str) -> dict[bytes, int] | None:
    """The mergeable ranks of a shipped encoding, or None when it is not shipped (or damaged).

    Raises:
        KeyError: when `name` is not one of `BUNDLED`.
    """
    spec = BUNDLED[name]
    try:
        data = resources.files(__name__).joinpath(spec.filename).read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != spec.sha256:
        logger.warning("shipped encoding file %s has the wrong hash; not used", spec.filename)
        return None
    # tiktoken's `.tiktoken` format: one "<base64 token> <rank>" per line.
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }


def load_bundled(name: str) -> Any | None:
    """The shipped encoding `name` as a `tiktoken.Encoding` (memoised), or None.

    None when `name` is not shipped, its file is missing or damaged, or tiktoken cannot be
    imported.
    """
    spec = BUNDLED.get(name)
    if spec is None:
        return None
    with _LOCK:
        hit = _LOADED.get(name)
        if hit is not None:
            return hit
        try:
            import tiktoken
        except ImportError:
            return None
        ranks = read_ranks(name)
        if ranks is None:
            return None
        encoding = tiktoken.Encoding(
            name,
            pat_str=spec.pat_str,
            mergeable_ranks=ranks,
            special_tokens=dict(spec.special_tokens),
        )
        _LOADED[name] = encoding
        return encoding
