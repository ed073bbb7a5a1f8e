"""RedisCluster (sync and asyncio) on three masters: the hold's own connection goes to the
master of the key's slot, and guarded writes land there (docs/commands.md, "Guarded writes, end to
end", step 1: one hash tag for the lock and its data)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from helpers import TTL, run, wait_for
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

import redis_lock_client as sync_api
import redis_lock_client.asyncio as async_api

LOCK, DATA = "{order:42}:lock", "{order:42}:data"


def _owner_and_others(nodes, rc):
    owner = rc.get_node_from_key(LOCK)
    direct = {n.port: n.client() for n in nodes}
    return direct.pop(owner.port), list(direct.values())


def test_sync_cluster_lock_and_guarded_write(cluster_nodes, protocol):
    rc = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port, protocol=protocol)
    rc.delete(DATA)
    owner, others = _owner_and_others(cluster_nodes, rc)
    lock = sync_api.Lock(rc, LOCK, ttl=TTL)
    with lock.acquire(timeout=1) as hold:
        assert owner.execute_command("LOCK.INFO", LOCK) is not None
        assert hold.guard("HSET", DATA, "status", "paid") == 1
        time.sleep(TTL)  # the keep-alive, on the owner's connection, keeps it
        assert hold.held and lock.info().holder == hold.token
        assert hold.guard("RPUSH", DATA + ":events", "paid") == 1
    assert owner.hget(DATA, "status") == b"paid"
    assert all(o.dbsize() == 0 for o in others)
    with pytest.raises(sync_api.Fenced):
        hold.guard("HSET", DATA, "status", "refunded")
    # A waiter on the cluster is handed the lock on release.
    first = lock.acquire()
    box = {}
    t = threading.Thread(target=lambda: box.update(h=lock.acquire(timeout=5)))
    t.start()
    wait_for(lambda: (lock.info() or None) and lock.info().waiters == 1)
    first.release()
    t.join(5)
    assert box["h"].fence > first.fence
    owner.delete(key := box["h"].name)
    assert box["h"].lost.wait(2)  # and the keep-alive notices a delete there too
    assert key == LOCK
    rc.delete(DATA, DATA + ":events")
    rc.close()


def test_sync_cluster_follows_a_moved_slot(cluster_nodes, protocol):
    """The client's slot map is stale (the slot moved after it was read): the hold's own
    connection follows MOVED to the new owner."""
    key = "{moved}:lock"
    rc = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port, protocol=protocol)
    slot = rc.keyslot(key)
    old = rc.get_node_from_key(key)
    direct = {n.port: n.client() for n in cluster_nodes}
    new_port = next(p for p in direct if p != old.port)
    new_id = direct[new_port].execute_command("CLUSTER MYID")
    direct[new_port].execute_command("CLUSTER SETSLOT", slot, "NODE", new_id)
    direct[new_port].execute_command("CLUSTER BUMPEPOCH")
    for port, c in direct.items():
        if port != new_port:
            c.execute_command("CLUSTER SETSLOT", slot, "NODE", new_id)
    redirected = _rejected_acquires(direct[old.port])
    try:
        with sync_api.Lock(rc, key, ttl=30).acquire(timeout=1) as hold:
            assert direct[new_port].execute_command("LOCK.INFO", key) is not None
            assert hold.fence > 0
        assert _rejected_acquires(direct[old.port]) == redirected + 1  # answered MOVED
    finally:
        old_id = direct[old.port].execute_command("CLUSTER MYID")
        for c in direct.values():
            c.execute_command("CLUSTER SETSLOT", slot, "NODE", old_id)
        direct[old.port].execute_command("CLUSTER BUMPEPOCH")
        wait_for(lambda: all(
            c.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0 for c in direct.values()
        ))
        rc.close()


def _rejected_acquires(node):
    stats = node.info("commandstats").get("cmdstat_lock.acquire", {})
    return stats.get("rejected_calls", 0)


def test_async_cluster_lock_and_guarded_write(cluster_nodes, protocol):
    sync_rc = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    owner, others = _owner_and_others(cluster_nodes, sync_rc)
    sync_rc.close()

    async def main():
        rc = AsyncRedisCluster(host="127.0.0.1", port=cluster_nodes[0].port, protocol=protocol)
        await rc.delete(DATA)
        lock = async_api.Lock(rc, LOCK, ttl=TTL)
        async with lock.acquire(timeout=1) as hold:
            assert await hold.guard("HSET", DATA, "status", "paid") == 1
            await asyncio.sleep(TTL)
            assert hold.held and (await lock.info()).holder == hold.token
        assert owner.hget(DATA, "status") == b"paid"
        assert all(o.dbsize() == 0 for o in others)
        with pytest.raises(async_api.Fenced):
            await hold.guard("HSET", DATA, "status", "refunded")
        await rc.delete(DATA)
        await rc.aclose()

    run(main())



