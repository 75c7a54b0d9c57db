"""Coordinator shards: which shard owns a session, and the gateway's router over them.

A session's id names its shard (``"<shard>-<random hex>"``; an id without a shard prefix, as written
before shards existed, is shard 0). Each shard is a single-replica coordinator deployment with its own
session log namespace and lease (``shard_log``), so a shard that dies takes only its own sessions down.

Guarantees of ``ShardRouter``: every call for a session goes to the shard its id names, and an id that
names no shard of this application is answered 404 "no session" without reaching any shard (a stale
client or a changed N: nothing runs twice, nothing runs on the wrong shard); a create with an
Idempotency-Key goes to the shard that key hashes to, so a retried create finds its first answer; a
create without one goes to the next shard in turn; ``stats`` adds the shards up and lists each one;
``usage`` adds up every shard's.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..core.errors import NotFound
from ..core.ids import session_id, shard_of  # noqa: F401 - the id format, where routing reads it
from .reports import combined_cache, merged
from .usage import merged as merged_usage
from .usage import with_measured

log = logging.getLogger(__name__)

CallShard = Callable[..., Awaitable[Any]]  # (shard index, coordinator method, *args, **kwargs) -> result
SUMMED = ("in_memory", "committed_steps", "queued", "log_flushes", "resumed", "fallbacks", "redrafts",
          "process_cpu_s")


def shard_log(uri: str, shard: int) -> str:
    """Shard ``shard``'s session log: shard 0 keeps the configured one (so N=1 logs carry over)."""
    return uri if shard == 0 else f"{uri.rstrip('/')}/shard-{shard}"


class ShardRouter:
    """``meter``, if given, calls the GPU meter (``usage`` takes its measured figures)."""

    def __init__(self, call_shard: CallShard, n: int, meter: Callable[..., Awaitable[Any]] | None = None):
        self.call_shard, self.n, self.meter = call_shard, n, meter
        self._turn = itertools.cycle(range(n))

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "stats":
            return combined(await asyncio.gather(*(self.call_shard(i, "stats") for i in range(self.n))))
        if method == "usage":  # each shard's log holds its own sessions: added up, nothing twice
            usage = merged_usage(await asyncio.gather(*(self.call_shard(i, "usage", *args) for i in range(self.n))))
            return usage if self.meter is None else with_measured(usage, await self._measured(*args))
        if method == "events_many":  # (shard, wants, wait_s): the gateway's one poll of a shard
            return await self.call_shard(args[0], method, *args[1:], **kwargs)
        if method in ("create", "create_conversation"):
            return await self.call_shard(self._create_shard(kwargs), method, *args, **kwargs)
        sid = args[0]
        shard = shard_of(sid)
        if shard is None or shard >= self.n:
            raise NotFound(f"no session {sid!r}")
        return await self.call_shard(shard, method, *args, **kwargs)

    async def _measured(self, *args: Any) -> dict[str, Any]:
        try:
            return await self.meter("usage", *args)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - without the meter, usage is estimated, as it was
            log.warning("GPU meter did not answer for usage (%s): GPU-s are estimated", exc)
            return {}

    def _create_shard(self, kwargs: dict[str, Any]) -> int:
        key = kwargs.get("idempotency_key")
        if key is None:
            return next(self._turn)
        digest = hashlib.sha256(f"{kwargs.get('owner')}\0{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.n


def combined(shards: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One view of every shard's ``stats()``: counters summed, batch sizes merged, latency percentiles
    of the worst shard (percentiles do not add up), and each shard's own stats under ``shards``."""
    if len(shards) == 1:
        return {**shards[0], "coordinators": 1, "shards": list(shards)}
    sessions: dict[str, int] = {}
    for s in shards:
        for status, n in s["sessions"].items():
            sessions[status] = sessions.get(status, 0) + n
    out: dict[str, Any] = {"coordinators": len(shards), "engines": shards[0]["engines"], "sessions": sessions}
    for key in SUMMED:
        out[key] = sum(s[key] for s in shards)
    out["batch_sizes"] = {name: merged(s["batch_sizes"].get(name, {}) for s in shards)
                          for name in {n for s in shards for n in s["batch_sizes"]}}
    for key in ("overhead_s", "intent_log_wait_s"):
        out[key] = worst(s[key] for s in shards)
    out["engine_wait_s"] = {kind: worst(s["engine_wait_s"][kind] for s in shards)
                            for kind in shards[0]["engine_wait_s"]}
    out["cache"] = combined_cache([s["cache"] for s in shards])
    if "prefill_ahead" in shards[0]:
        out["prefill_ahead"] = {k: sum(s["prefill_ahead"][k] for s in shards) for k in shards[0]["prefill_ahead"]}
    ks = {k for s in shards for k in s["speculation"]["chosen_k"]}
    out["speculation"] = {"mode": shards[0]["speculation"]["mode"],
                          "chosen_k": {k: sum(s["speculation"]["chosen_k"].get(k, 0) for s in shards) for k in sorted(ks, key=int)}}
    out["shards"] = list(shards)
    return out


def worst(percentiles: Any) -> dict[str, Any]:
    rows = list(percentiles)
    out: dict[str, Any] = {"n": sum(r.get("n", 0) for r in rows)}
    for key in {k for r in rows for k in r if k != "n"}:
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = max(values) if values else None
    return out
