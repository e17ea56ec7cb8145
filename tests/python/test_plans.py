"""Plan-based writes and placements: open_for_write, write_plan, commit,
revoke and get_location, on the workers' own node (this machine)."""

import pytest

import mooncake
from conftest import pattern


def test_open_write_commit_then_read(client, keys, nodes):
    key = keys()
    data = pattern(100_000, seed=3)
    plan = client.open_for_write(key, len(data), preferred_node=nodes[0])
    assert (plan.key, plan.node_id, plan.size) == (key, nodes[0], len(data))
    assert plan.memory.kind == "host_file" and plan.memory.path
    assert "WritePlan(" in repr(plan)
    client.write_plan(plan, data)
    client.commit(plan)
    assert client.get(key) == data
    where = client.get_location(key)
    assert (where.node_id, where.size) == (nodes[0], len(data))
    assert where.version >= 1 and where.memory.kind == "host_file"


def test_revoke_leaves_no_object_and_commit_after_revoke_fails(client, keys, nodes):
    key = keys()
    plan = client.open_for_write(key, 4096, preferred_node=nodes[0])
    client.revoke(plan)
    assert client.exist(key) is False
    with pytest.raises(mooncake.Error):
        client.commit(plan)


def test_write_plan_needs_exactly_the_planned_size(client, keys, nodes):
    key = keys()
    plan = client.open_for_write(key, 16, preferred_node=nodes[0])
    with pytest.raises(mooncake.Error) as info:
        client.write_plan(plan, b"short")
    assert info.value.name == "INVALID_PARAMS"
    client.revoke(plan)


def test_open_for_write_upsert_replaces(client, keys, nodes):
    key = keys()
    client.put(key, b"old value", preferred_node=nodes[0])
    plan = client.open_for_write(key, 9, upsert=True)
    client.write_plan(plan, b"new value")
    client.commit(plan)
    assert client.get(key) == b"new value"
    with pytest.raises(mooncake.Error) as info:
        client.get_location(keys())
    assert info.value.name == "OBJECT_NOT_FOUND"


def test_write_plan_refuses_a_plan_already_committed_or_revoked(client, keys, nodes):
    # A committed plan's bytes are the published object (rewriting them
    # changed it under the same version); a revoked plan's space is given
    # back at once and may hold another key's object. write_plan used to
    # accept both.
    key, revoked_key, other = keys(3)
    plan = client.open_for_write(key, 4096, preferred_node=nodes[0])
    client.write_plan(plan, b"A" * 4096)
    client.commit(plan)
    with pytest.raises(mooncake.Error) as info:
        client.write_plan(plan, b"Z" * 4096)
    assert info.value.name == "ILLEGAL_CLIENT"
    assert client.get(key) == b"A" * 4096
    assert plan.state == "committed" and "state=committed" in repr(plan)
    with pytest.raises(mooncake.Error) as info:
        client.commit(plan)  # the cluster refuses it; it stays committed
    assert info.value.name == "ILLEGAL_CLIENT" and plan.state == "committed"

    revoked = client.open_for_write(revoked_key, 4096, preferred_node=nodes[0])
    client.revoke(revoked)
    client.put(other, b"C" * 4096, preferred_node=nodes[0])  # may reuse the space
    with pytest.raises(mooncake.Error) as info:
        client.write_plan(revoked, b"R" * 4096)
    assert info.value.name == "ILLEGAL_CLIENT"
    assert client.get(other) == b"C" * 4096
    assert client.exist(revoked_key) is False
    assert revoked.state == "revoked"
    fresh = client.open_for_write(keys(), 8, preferred_node=nodes[0])
    assert fresh.state == "open"
    client.revoke(fresh)
