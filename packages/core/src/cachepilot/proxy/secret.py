"""The proxy's per-store secret: what thread names, key scopes and labels are salted with.

A digest of an API key that anyone can recompute confirms a guessed key; a digest salted with
a secret the store keeps does not. The secret is a random 32-byte value kept in the state
store under a reserved thread name (`SECRET_THREAD`), so every process on one store (replicas,
workers, a restart) derives the same names; without a store it lives as long as the process.
With a store, the secret is never made up by one process: while the store cannot be read or
written, `load_secret` raises `SecretUnavailableError` (the proxy answers 503 and asks again on the
next request), so no thread is ever stored under a second scope.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets

from cachepilot.state.base import RESERVED_PREFIX, StateStore, VersionedStateStore

__all__ = ["RESERVED_PREFIX", "SECRET_THREAD", "Secret", "SecretUnavailableError", "load_secret"]

logger = logging.getLogger(__name__)

SECRET_THREAD = RESERVED_PREFIX + "secret"


class SecretUnavailableError(RuntimeError):
    """The state store could not give the proxy its secret (it is down or refused)."""


class Secret:
    """Keyed digests for names that must not reveal what they were made from.

    Args:
        key: the secret bytes (at least 16).
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a proxy secret needs at least 16 bytes")
        self._key = key

    @classmethod
    def generate(cls) -> Secret:
        """A new random secret."""
        return cls(secrets.token_bytes(32))

    def digest(self, purpose: str, value: str, size: int = 16) -> str:
        """`size` hex characters of HMAC-SHA256(secret, purpose, value)."""
        mac = hmac.new(self._key, purpose.encode("utf-8"), hashlib.sha256)
        mac.update(b"\x00")
        mac.update(value.encode("utf-8", "surrogatepass"))
        return mac.hexdigest()[:size]

    def label(self, thread: str) -> str:
        """What logs and metrics show for a thread name: a salted digest, never the name."""
        return "t" + self.digest("label", thread, 12)

    def to_json(self) -> str:
        """The stored form."""
        return json.dumps({"secret": self._key.hex()})

    @classmethod
    def from_json(cls, text: str) -> Secret:
        """Read the stored form (`ValueError` when it is not one)."""
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("secret"), str):
            raise ValueError("not a stored proxy secret")
        return cls(bytes.fromhex(data["secret"]))


async def load_secret(store: StateStore | None) -> Secret:
    """The store's secret, created and saved on first use (a process-local one without a store).

    On a versioned store the secret is created by compare-and-set, so processes starting on
    an empty store at once agree; on another store each reads the stored value back after
    saving, so they agree unless their saves interleave their reads.

    Raises:
        SecretUnavailableError: the store could not be read or written, or holds a secret that
            cannot be read (never replaced by one of this process's own).
    """
    if store is None:
        return Secret.generate()
    try:
        saved = await store.load(SECRET_THREAD)
        if saved:
            return Secret.from_json(saved)
        made = Secret.generate()
        if isinstance(store, VersionedStateStore):
            # Created once: a process that loses the race reads the winner's secret.
            if await store.save_if(SECRET_THREAD, made.to_json(), 0) is not None:
                return made
        else:
            await store.save(SECRET_THREAD, made.to_json())
        saved = await store.load(SECRET_THREAD)
        if saved:
            return Secret.from_json(saved)
    except Exception as exc:
        logger.warning(
            "the proxy secret could not be read from or saved to the state store (%s); "
            "requests that need it are refused until the store answers",
            type(exc).__name__,
        )
        logger.debug("the state store's error", exc_info=True)
        raise SecretUnavailableError("the proxy's state store is unavailable") from exc
    raise SecretUnavailableError("the state store did not keep the proxy's secret")
