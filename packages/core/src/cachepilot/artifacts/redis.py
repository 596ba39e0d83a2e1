"""`RedisArtifactStore`: artifacts in Redis (sync client), shared safely by processes.

Keys under a prefix (`P`), the thread hex-encoded (`T`, so no thread id can collide with
another or with the separators):

- `P:a:T:<ref>` a hash per artifact (payload and metadata);
- `P:l:T` the thread's refs by creation time (`list`), `P:u:T` by last access (its cap);
- `P:lru` every `T:<ref>` by last access (retention and the total cap);
- `P:b:T` and `P:bytes` byte counters; `P:threads` the threads holding artifacts;
- `P:r:T` the thread's tombstones (ref → time and reason), `P:tomb` all of them by time.

Every write is one Lua script, so counters stay consistent and a `put` racing another
process's `put` of the same content stores it once. Needs a standalone Redis server (the
scripts compute keys, which Redis Cluster does not allow) and the `redis` package
(`cachepilot[redis]`).
"""

from __future__ import annotations

import builtins
import logging
import time
from typing import Any, ClassVar

from cachepilot.artifacts.base import (
    DEFAULT_MAX_BYTES_PER_THREAD,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_RETENTION_SECONDS,
    FORGOTTEN_MARK,
    REMOVED_BY_FORGET,
    REMOVED_BY_RETENTION,
    REMOVED_BY_SIZE,
    TOMBSTONE_SECONDS,
    Artifact,
    ArtifactInfo,
    BaseArtifactStore,
    Clock,
    Encoded,
    artifact_from,
    check_same_content,
    load_meta,
    now_from,
)

__all__ = ["RedisArtifactStore"]

logger = logging.getLogger(__name__)

_BATCH = 500
"""Artifacts one retention script removes at most (Redis serves nobody while a script runs)."""

_INFO_FIELDS = (
    "sha256", "is_text", "media_type", "meta", "size",
    "created_at", "last_access", "access_count",
)  # fmt: skip

# One script, dispatched on ARGV[1]; ARGV[2] is the key prefix. Values written back are the
# caller's strings (a Lua number would lose digits of a timestamp).
_SCRIPT = """
local op, P = ARGV[1], ARGV[2]
local function akey(t, ref) return P .. ':a:' .. t .. ':' .. ref end

local function tombstone(t, ref, reason, now)
  redis.call('HSET', P .. ':r:' .. t, ref, now .. '\\t' .. reason)
  redis.call('ZADD', P .. ':tomb', now, t .. ':' .. ref)
end

local function drop(t, ref)
  local size = redis.call('HGET', akey(t, ref), 'size')
  if not size then return false end
  redis.call('DEL', akey(t, ref))
  redis.call('ZREM', P .. ':l:' .. t, ref)
  redis.call('ZREM', P .. ':u:' .. t, ref)
  redis.call('ZREM', P .. ':lru', t .. ':' .. ref)
  redis.call('DECRBY', P .. ':bytes', size)
  if redis.call('DECRBY', P .. ':b:' .. t, size) <= 0 then
    redis.call('DEL', P .. ':b:' .. t)
    redis.call('SREM', P .. ':threads', t)
  end
  return true
end

local function split(member)
  local at = string.find(member, ':', 1, true)
  return string.sub(member, 1, at - 1), string.sub(member, at + 1)
end

-- Evict least recently used artifacts until `counter` is within `cap`, never `keep`.
local function enforce(zset, counter, cap, thread, keep, now)
  if cap < 0 then return 0 end
  local removed, index = 0, 0
  while tonumber(redis.call('GET', counter) or '0') > cap do
    local found = redis.call('ZRANGE', zset, index, index)
    if #found == 0 then break end
    local t, ref
    if thread then t, ref = thread, found[1] else t, ref = split(found[1]) end
    if ref == keep and t == ARGV[3] then
      index = index + 1
    else
      if drop(t, ref) then
        tombstone(t, ref, ARGV[#ARGV], now)
        removed = removed + 1
      else
        redis.call('ZREM', zset, found[1])
      end
    end
  end
  return removed
end

local function touch(t, ref, now)
  local last = redis.call('HGET', akey(t, ref), 'last_access')
  if tonumber(last) < tonumber(now) then
    redis.call('HSET', akey(t, ref), 'last_access', now)
    redis.call('ZADD', P .. ':u:' .. t, now, ref)
    redis.call('ZADD', P .. ':lru', now, t .. ':' .. ref)
  end
end

if op == 'put' then
  -- ARGV: op P T ref sha is_text media_type meta data now thread_cap total_cap reason
  local t, ref, now = ARGV[3], ARGV[4], ARGV[10]
  local existing = redis.call('HGET', akey(t, ref), 'sha256')
  if existing then
    if existing == ARGV[5] then touch(t, ref, now) end
    return {0, existing}
  end
  redis.call('HSET', akey(t, ref), 'sha256', ARGV[5], 'is_text', ARGV[6],
    'media_type', ARGV[7], 'meta', ARGV[8], 'data', ARGV[9], 'size', #ARGV[9],
    'created_at', now, 'last_access', now, 'access_count', 0)
  redis.call('ZADD', P .. ':l:' .. t, now, ref)
  redis.call('ZADD', P .. ':u:' .. t, now, ref)
  redis.call('ZADD', P .. ':lru', now, t .. ':' .. ref)
  redis.call('INCRBY', P .. ':b:' .. t, #ARGV[9])
  redis.call('INCRBY', P .. ':bytes', #ARGV[9])
  redis.call('SADD', P .. ':threads', t)
  if redis.call('HDEL', P .. ':r:' .. t, ref) > 0 then
    redis.call('ZREM', P .. ':tomb', t .. ':' .. ref)
  end
  local evicted = enforce(P .. ':u:' .. t, P .. ':b:' .. t, tonumber(ARGV[11]), t, ref, now)
  evicted = evicted + enforce(P .. ':lru', P .. ':bytes', tonumber(ARGV[12]), nil, ref, now)
  return {1, evicted}
elseif op == 'access' then
  -- ARGV: op P T ref now
  if redis.call('EXISTS', akey(ARGV[3], ARGV[4])) == 0 then return 0 end
  redis.call('HINCRBY', akey(ARGV[3], ARGV[4]), 'access_count', 1)
  touch(ARGV[3], ARGV[4], ARGV[5])
  return 1
elseif op == 'delete' then
  -- ARGV: op P T ref
  if drop(ARGV[3], ARGV[4]) then return 1 end
  return 0
elseif op == 'delete_all' then
  -- ARGV: op P T
  local t = ARGV[3]
  local refs = redis.call('ZRANGE', P .. ':l:' .. t, 0, -1)
  local count = 0
  for _, ref in ipairs(refs) do
    if drop(t, ref) then count = count + 1 end
  end
  for _, ref in ipairs(redis.call('HKEYS', P .. ':r:' .. t)) do
    redis.call('ZREM', P .. ':tomb', t .. ':' .. ref)
  end
  redis.call('DEL', P .. ':r:' .. t, P .. ':l:' .. t, P .. ':u:' .. t)
  return count
elseif op == 'forgotten' then
  -- ARGV: op P T now reason
  tombstone(ARGV[3], ARGV[5], ARGV[6], ARGV[4])
  return 1
elseif op == 'expire' then
  -- ARGV: op P tombstone_cutoff artifact_cutoff(or '') batch reason
  local old = redis.call('ZRANGEBYSCORE', P .. ':tomb', '-inf', '(' .. ARGV[3])
  for _, member in ipairs(old) do
    local t, ref = split(member)
    redis.call('HDEL', P .. ':r:' .. t, ref)
    redis.call('ZREM', P .. ':tomb', member)
  end
  if ARGV[4] == '' then return {0, 0} end
  local victims = redis.call('ZRANGEBYSCORE', P .. ':lru', '-inf', '(' .. ARGV[4],
    'LIMIT', 0, tonumber(ARGV[5]))
  local count = 0
  for _, member in ipairs(victims) do
    local t, ref = split(member)
    if drop(t, ref) then
      tombstone(t, ref, ARGV[6], ARGV[7])
      count = count + 1
    else
      redis.call('ZREM', P .. ':lru', member)
    end
  end
  return {count, #victims}
elseif op == 'caps' then
  -- ARGV: op P T(or '') now cap reason
  local t = ARGV[3]
  if t == '' then
    return enforce(P .. ':lru', P .. ':bytes', tonumber(ARGV[5]), nil, '', ARGV[4])
  end
  return enforce(P .. ':u:' .. t, P .. ':b:' .. t, tonumber(ARGV[5]), t, '', ARGV[4])
end
return redis.error_reply('unknown operation ' .. op)
"""


class RedisArtifactStore(BaseArtifactStore):
    """Artifacts in Redis, shared safely by processes (one Lua script per write).

    Args:
        client: a sync `redis.Redis` client, or a `redis://` / `rediss://` URL.
        prefix: key prefix (several stores can share one database under different prefixes).
        retention_seconds: Remove artifacts not accessed for this long (None: keep).
        max_bytes_per_thread: Per-thread cap; least-recently-accessed evicted first.
        max_total_bytes: Cap over every thread under the prefix, same eviction order.
        clock: Time source in seconds.

    Raises:
        ValueError: for bad limits, an empty prefix or a URL the client cannot read.
    """

    offload_async: ClassVar[bool] = True
    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "cachepilot",
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        max_bytes_per_thread: int | None = DEFAULT_MAX_BYTES_PER_THREAD,
        max_total_bytes: int | None = DEFAULT_MAX_TOTAL_BYTES,
        clock: Clock = time.time,
    ) -> None:
        self._init_store(retention_seconds, max_bytes_per_thread, max_total_bytes, clock)
        if not isinstance(prefix, str) or not prefix:
            raise ValueError("prefix must be a non-empty string")
        if isinstance(client, str):
            import redis

            try:
                client = redis.Redis.from_url(client)
            except ValueError as exc:
                raise ValueError(f"not a Redis URL: {exc}") from exc
        pool = getattr(client, "connection_pool", None)
        if getattr(pool, "connection_kwargs", {}).get("decode_responses"):
            raise ValueError("the Redis client must return bytes (decode_responses=False)")
        self._client = client
        self._prefix = prefix
        self._script = client.register_script(_SCRIPT)

    def __repr__(self) -> str:
        return f"RedisArtifactStore(prefix={self._prefix!r})"

    def _run(self, op: str, *args: Any) -> Any:
        return self._script(keys=[], args=[op, self._prefix, *args])

    def _hash_key(self, thread: str, ref: str) -> str:
        return f"{self._prefix}:a:{_hex(thread)}:{ref}"

    # -- hooks -----------------------------------------------------------------------------

    def _insert(self, thread: str, enc: Encoded, now: float) -> int | None:
        stamp = repr(float(now))
        inserted, detail = self._run(
            "put", _hex(thread), enc.ref, enc.sha256, "1" if enc.is_text else "0",
            enc.media_type, enc.meta_json, enc.data, stamp,
            _cap(self.limits.max_bytes_per_thread), _cap(self.limits.max_total_bytes),
            REMOVED_BY_SIZE,
        )  # fmt: skip
        if not inserted:
            check_same_content(enc, _text(detail))
            return None
        evicted = int(detail)
        if self._auto_prune_due(now):
            evicted += self._delete_expired(now)
        return evicted

    def _fetch(self, thread: str, ref: str) -> Artifact | None:
        values = self._client.hmget(self._hash_key(thread, ref), [*_INFO_FIELDS, "data"])
        if values[0] is None or values[-1] is None:
            return None
        return artifact_from(_info(ref, thread, values), bytes(values[-1]))

    def _count_access(self, thread: str, ref: str, now: float) -> bool:
        return bool(self._run("access", _hex(thread), ref, repr(float(now))))

    def _list_thread(self, thread: str) -> builtins.list[ArtifactInfo]:
        refs = [_text(ref) for ref in self._client.zrange(self._list_key(thread), 0, -1)]
        if not refs:
            return []
        with self._client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hmget(self._hash_key(thread, ref), list(_INFO_FIELDS))
            rows = pipe.execute()
        # A ref another process removed between the two reads is left out.
        return [
            _info(ref, thread, row)
            for ref, row in zip(refs, rows, strict=True)
            if row[0] is not None
        ]

    def _list_key(self, thread: str) -> str:
        return f"{self._prefix}:l:{_hex(thread)}"

    def _delete_one(self, thread: str, ref: str) -> bool:
        return bool(self._run("delete", _hex(thread), ref))

    def _delete_all(self, thread: str) -> int:
        return int(self._run("delete_all", _hex(thread)))

    def _removed_reason(self, thread: str, ref: str) -> str | None:
        marks = self._client.hmget(f"{self._prefix}:r:{_hex(thread)}", [ref, FORGOTTEN_MARK])
        for mark in marks:
            if mark is not None:
                return _text(mark).split("\t", 1)[1]
        return None

    def _mark_forgotten(self, thread: str) -> None:
        stamp = repr(float(now_from(self._clock, None)))
        self._run("forgotten", _hex(thread), stamp, FORGOTTEN_MARK, REMOVED_BY_FORGET)

    def prune(self, now: float | None = None) -> int:
        """Remove artifacts idle longer than the retention, then enforce the caps."""
        current = now_from(self._clock, now)
        removed = self._delete_expired(current)
        stamp = repr(float(current))
        cap = self.limits.max_bytes_per_thread
        if cap is not None:
            for thread in self._client.sscan_iter(f"{self._prefix}:threads"):
                if int(self._client.get(f"{self._prefix}:b:{_text(thread)}") or 0) > cap:
                    removed += int(self._run("caps", _text(thread), stamp, cap, REMOVED_BY_SIZE))
        total = self.limits.max_total_bytes
        if total is not None:
            removed += int(self._run("caps", "", stamp, total, REMOVED_BY_SIZE))
        if removed:
            logger.info("pruned %d artifacts", removed)
        return removed

    @property
    def total_bytes(self) -> int:
        """Bytes of payload currently stored (all threads under the prefix)."""
        return max(int(self._client.get(f"{self._prefix}:bytes") or 0), 0)

    def close(self) -> None:
        """Release the client's connections."""
        self._client.close()

    # -- retention -----------------------------------------------------------------------

    def _delete_expired(self, now: float) -> int:
        retention = self.limits.retention_seconds
        tomb_cutoff = repr(float(now - max(retention or 0.0, TOMBSTONE_SECONDS)))
        cutoff = "" if retention is None else repr(float(now - retention))
        removed = 0
        while True:
            count, seen = self._run(
                "expire", tomb_cutoff, cutoff, _BATCH, REMOVED_BY_RETENTION, repr(float(now))
            )
            removed += int(count)
            if int(seen) < _BATCH:
                return removed


def _hex(thread: str) -> str:
    """A thread id as it appears in keys: hex of its UTF-8 bytes (no ':' can collide)."""
    return thread.encode("utf-8").hex()


def _cap(cap: int | None) -> int:
    return -1 if cap is None else cap


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _info(ref: str, thread: str, row: builtins.list[Any]) -> ArtifactInfo:
    sha256, is_text, media_type, meta, size, created, last, count = row[:8]
    return ArtifactInfo(
        ref=ref,
        thread=thread,
        is_text=_text(is_text) == "1",
        media_type=_text(media_type),
        meta=load_meta(_text(meta)),
        created_at=float(created),
        last_access=float(last),
        access_count=int(count),
        size=int(size),
        sha256=_text(sha256),
    )
