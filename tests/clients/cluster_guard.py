"""Guarded writes through redis-py's RedisCluster, against a cluster of three masters.

RedisCluster routes a command by its keys. For a command flagged `movablekeys` in COMMAND
(LOCK.GUARD is, through the module's getkeys-api) it asks COMMAND GETKEYS, which names the
lock key and the inner command's keys, and sends the command to the master of their slot;
keys in different slots it refuses itself, before sending anything.

Checks: acquire + LOCK.GUARD with hash-tagged keys land on the master that owns the slot, and
are sent there directly (no other master ever sees LOCK.GUARD, not even to answer MOVED);
each call costs one COMMAND GETKEYS on the default node, which `target_nodes` saves; a stale
fence is refused; keys in two slots are refused by RedisCluster and, sent to a node directly,
by the server (CROSSSLOT).

Run by tests/clients/ as `python cluster_guard.py <port of any node>`, with flow.py beside it
(its raw `guarded` helper); exits non-zero on the first failure. docs/CLIENTS.md, "Guarded
writes in a cluster", says what this checks.
"""

import sys
import uuid

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from flow import Fenced, guarded


def guard_calls(node):
    """How many LOCK.GUARD calls this node saw (run, failed, or rejected with MOVED)."""
    stats = node.info("commandstats").get("cmdstat_lock.guard")
    if stats is None:
        return 0
    return stats["calls"] + stats.get("rejected_calls", 0)


def getkeys_calls(node):
    """How many COMMAND GETKEYS this node answered."""
    stats = node.info("commandstats").get("cmdstat_command|getkeys")
    return 0 if stats is None else stats["calls"]


def main():
    port = int(sys.argv[1])
    rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=30)
    direct = {}
    try:
        masters = rc.get_primaries()
        assert len(masters) == 3, f"expected 3 masters, got {masters}"
        direct = {
            (n.host, n.port): redis.Redis(host=n.host, port=n.port, socket_timeout=30)
            for n in masters
        }
        flags = rc.commands_parser.commands["lock.guard"]["flags"]
        assert "movablekeys" in flags, f"LOCK.GUARD flags as redis-py read them: {flags}"

        lock, data = "{order:42}:lock", "{order:42}:data"  # one slot: the tag's, order:42
        slot = rc.keyslot(lock)
        assert rc.keyslot(data) == slot
        owner = rc.get_node_from_key(lock)
        others = [c for (h, p), c in direct.items() if (h, p) != (owner.host, owner.port)]
        assert len(others) == 2
        before = {addr: guard_calls(c) for addr, c in direct.items()}

        token = str(uuid.uuid4())
        fence = rc.execute_command("LOCK.ACQUIRE", lock, token, 30000)
        assert isinstance(fence, int) and fence > 0, f"acquire: {fence!r}"

        # A guarded write lands, on the master of the tag's slot.
        assert guarded(rc, lock, fence, "HSET", data, "status", "paid") == 1
        on_owner = direct[(owner.host, owner.port)]
        assert on_owner.hget(data, "status") == b"paid", "the write is not on the slot's master"
        assert all(c.dbsize() == 0 for c in others), "a key landed on another master"
        # The inner command's reply passes through: HGET's own. RedisCluster asked the default
        # node for its keys first; with target_nodes it does not ask.
        default = rc.get_default_node()
        asked = direct[(default.host, default.port)]
        n = getkeys_calls(asked)
        assert guarded(rc, lock, fence, "HGET", data, "status") == b"paid"
        assert getkeys_calls(asked) == n + 1, "RedisCluster did not ask COMMAND GETKEYS"
        reply = rc.execute_command(
            "LOCK.GUARD", lock, fence, "HGET", data, "status",
            target_nodes=rc.get_node_from_key(lock),
        )
        assert reply == b"paid"
        assert getkeys_calls(asked) == n + 1, "asked COMMAND GETKEYS despite target_nodes"

        # A new fence for the holder: the old one is stale now, and refused.
        newer = rc.execute_command("LOCK.FENCE", lock, token)
        assert newer > fence
        try:
            guarded(rc, lock, fence, "HSET", data, "status", "stale")
            raise AssertionError("a write under a stale fence landed")
        except Fenced as e:
            assert str(e) == "FENCED the lock is held under a newer fence", e
        assert on_owner.hget(data, "status") == b"paid"
        assert guarded(rc, lock, newer, "HSET", data, "status", "shipped") == 0

        # Keys in two slots: RedisCluster refuses to send it; a node refuses it with CROSSSLOT.
        elsewhere = "order:42:data"  # no tag: another slot
        assert rc.keyslot(elsewhere) != slot
        try:
            guarded(rc, lock, newer, "SET", elsewhere, "x")
            raise AssertionError("RedisCluster sent keys of two slots")
        except RedisClusterException as e:
            assert "same key slot" in str(e), e
        try:
            guarded(on_owner, lock, newer, "SET", elsewhere, "x")
            raise AssertionError("the server ran keys of two slots")
        except redis.ResponseError as e:
            assert str(e).startswith("CROSSSLOT "), e

        # Routed straight to the owner: the other masters never saw LOCK.GUARD.
        after = {addr: guard_calls(c) for addr, c in direct.items()}
        for addr in direct:
            if addr == (owner.host, owner.port):
                assert after[addr] - before[addr] == 6, f"{addr}: {before[addr]} -> {after[addr]}"
            else:
                assert after[addr] == before[addr], f"{addr} saw LOCK.GUARD: {after[addr]}"

        assert rc.execute_command("LOCK.RELEASE", lock, token) == 1
        try:
            guarded(rc, lock, newer, "HSET", data, "status", "late")
            raise AssertionError("a guarded write landed on a released lock")
        except Fenced as e:
            assert str(e) == "FENCED the lock is not held", e
        assert on_owner.hget(data, "status") == b"shipped"
        print(
            f"redis-py {redis.__version__} RedisCluster: ok (slot {slot} on "
            f"{owner.host}:{owner.port}, fences {fence} < {newer})"
        )
    finally:
        rc.close()
        for c in direct.values():
            c.close()


if __name__ == "__main__":
    main()
