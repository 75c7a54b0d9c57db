"""``serve/sessions/conversation_records.py``: a conversation is a function of its records; a repeat writes nothing twice."""

from __future__ import annotations

import pytest

from specagent_ray.serve.core.errors import BadRequest, NotFound, ServiceUnavailable
from specagent_ray.serve.sessions.conversation_records import Conversations


def shard(log: list, fenced: list | None = None) -> Conversations:
    async def stored() -> None:
        return None

    def serving() -> None:
        if fenced:
            raise ServiceUnavailable("fenced")

    return Conversations(3, lambda cid, r: log.append((cid, r)), stored, serving, wall=lambda: 1_700_000_000)


async def test_a_restored_conversation_is_the_one_that_was_written():
    log: list = []
    live = shard(log)
    view = await live.create([{"type": "message", "role": "user", "content": "hi"}], {"k": "v"}, "alice", "key-1")
    cid = view["id"]
    assert cid.startswith("conv_3-")  # its id names its shard
    await live.call(cid, "add", [{"type": "message", "role": "user", "content": "more", "id": "msg_mine"}], "alice")
    await live.call(cid, "link", {"response": "resp_3-00000000000000aa_0", "input": []}, "alice")
    await live.call(cid, "link", {"response": "resp_3-00000000000000aa_0", "input": []}, "alice")  # a retry
    await live.call(cid, "delete_item", "msg_mine", "alice")
    await live.call(cid, "metadata", {"k": "w"}, "alice")
    assert sum(r["t"] == "conv_response" for _, r in log) == 1  # the repeated link wrote nothing
    restored = shard([])
    restored.restore(cid, [r for c, r in log if c == cid])
    assert restored.get(cid, "alice") == live.get(cid, "alice")
    assert (await restored.create([], {}, "alice", "key-1"))["id"] == cid  # the key survives a restart


async def test_another_owner_a_deleted_one_a_duplicate_id_and_a_fenced_shard():
    log: list = []
    conversations = shard(log)
    cid = (await conversations.create([{"type": "message", "role": "user", "content": "x", "id": "msg_a"}],
                                      {}, "alice"))["id"]
    with pytest.raises(NotFound):
        conversations.get(cid, "mallory")
    with pytest.raises(BadRequest):
        await conversations.call(cid, "add", [{"type": "message", "role": "user", "content": "y", "id": "msg_a"}],
                                 "alice")
    await conversations.call(cid, "delete", None, "alice")
    with pytest.raises(NotFound):
        conversations.get(cid, "alice")
    fenced = shard([], fenced=["lost the lease"])
    with pytest.raises(ServiceUnavailable):
        await fenced.create([], {}, "alice")
