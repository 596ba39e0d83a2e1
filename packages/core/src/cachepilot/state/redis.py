"""`RedisStateStore`: per-thread pilot states in Redis (asyncio client).

One string per thread (`<prefix>:<thread>:cachepilot_state`) and a counter beside it
(`…:version`); `save_if` compares and sets in one Lua script, so processes sharing the server
notice each other (`VersionedStateStore`).
"""

from __future__ import annotations

from typing import Any

from cachepilot.state.base import TABLE, first_version

__all__ = ["RedisStateStore"]

_SAVE_IF = """
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current ~= tonumber(ARGV[2]) then return nil end
local ttl = tonumber(ARGV[3])
local version = current + 1
if current == 0 then version = tonumber(ARGV[4]) end
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
  redis.call('SET', KEYS[2], version, 'EX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], version)
end
return version
"""


class RedisStateStore:
    """One Redis string per thread (`<prefix>:<thread>:cachepilot_state`).

    Args:
        client: an async Redis client (`redis.asyncio.Redis`).
        prefix: key prefix (a `RedisSession`'s `key_prefix`).
        ttl: expiry in seconds (a `RedisSession`'s `ttl`), or None.
        owns_client: `aclose` closes the client (it was made for this store alone).
    """

    def __init__(
        self,
        client: Any,
        prefix: str = "agents:session",
        ttl: int | None = None,
        *,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._ttl = ttl
        self._owns_client = owns_client

    async def aclose(self) -> None:
        """Close the client's connections when the store owns it."""
        if self._owns_client:
            await self._client.aclose()

    def _key(self, thread: str) -> str:
        return f"{self._prefix}:{thread}:{TABLE}"

    async def load(self, thread: str) -> str | None:
        """The saved state, or None."""
        value = await self._client.get(self._key(thread))
        if value is None:
            return None
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    def _version_key(self, thread: str) -> str:
        return f"{self._key(thread)}:version"

    async def save(self, thread: str, state: str) -> None:
        """Replace the saved state (its version counts the save)."""
        async with self._client.pipeline(transaction=True) as pipe:
            # A new document starts at a random version (`first_version`), then counts up.
            pipe.set(self._version_key(thread), first_version() - 1, nx=True)
            if self._ttl:
                pipe.set(self._key(thread), state, ex=self._ttl)
                pipe.incr(self._version_key(thread))
                pipe.expire(self._version_key(thread), self._ttl)
            else:
                pipe.set(self._key(thread), state)
                pipe.incr(self._version_key(thread))
            await pipe.execute()

    async def load_versioned(self, thread: str) -> tuple[str | None, int]:
        """The saved state and its version."""
        state, version = await self._client.mget(self._key(thread), self._version_key(thread))
        text = state.decode("utf-8") if isinstance(state, bytes) else state
        return (None if text is None else str(text)), int(version or 0)

    async def version(self, thread: str) -> int:
        """The saved state's version (0: none)."""
        return int(await self._client.get(self._version_key(thread)) or 0)

    async def save_if(self, thread: str, state: str, expected: int) -> int | None:
        """Save if the version is still `expected` (one atomic script); the new version, or
        None when another writer saved first."""
        result = await self._client.eval(
            _SAVE_IF, 2, self._key(thread), self._version_key(thread), state, str(expected),
            str(self._ttl or 0), str(first_version()),
        )  # fmt: skip
        return None if result is None else int(result)

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        await self._client.delete(self._key(thread), self._version_key(thread))
