"""Leader election, sync then RedisCluster then asyncio: campaign, resign, the leader, and
observe() on LOCK.OBSERVE, against real servers: hand-offs, leases that end, each kind of
change in order, timeouts, and a follower that outlives a killed connection, a server restart
and failovers (to a replica that is up to date, and to one that is behind the follower)."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time

import pytest
import redis
import redis.asyncio as aredis
from helpers import SLACK, TTL, run, wait_for
from proxy import Proxy
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from servers import Server, replica_of

import redis_lock_client.asyncio as async_api
from redis_lock_client import Election, Leader, LockError, NotAcquired, ReadWriteLock


class Follower:
    """Iterates ``election.observe(**options)`` on a thread of its own, keeping what it
    yields in ``seen``; stops after ``count`` values (leaving the generator closes it)."""

    def __init__(self, election, count, **options):
        options.setdefault("timeout", 10)
        self.seen, self.error = [], None
        self.gen = election.observe(**options)
        self.count = count
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for value in self.gen:
                self.seen.append(value)
                if len(self.seen) == self.count:
                    break
        except BaseException as e:  # reported by the test
            self.error = e

    def wait(self, n, timeout=5.0):
        wait_for(lambda: len(self.seen) >= n or self.error, timeout)
        assert self.error is None, self.error
        return self.seen[n - 1]

    def join(self, timeout=10.0):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the follower did not end"
        assert self.error is None, self.error
        return self.seen


def observing(r) -> int:
    """Clients blocked in LOCK.OBSERVE now (INFO lock)."""
    return r.info("lock")["lock_observing_clients"]


def assert_in_fence_order(seen):
    fences = [leader.fence for leader in seen if leader is not None]
    assert fences == sorted(set(fences)), f"not strictly increasing: {seen}"


def test_campaign_leader_resign(r, key):
    a, b = Election(r, key, ttl=30, identity="candidate-a"), Election(r, key, ttl=30)
    assert a.leader() is None and a.leadership is None
    hold = a.campaign(timeout=1)
    assert hold.token == "candidate-a" and a.leadership is hold
    assert a.leader() == b.leader() == Leader("candidate-a", hold.fence)
    hold.guard("SET", key + ":data", "by a")  # the leadership is a hold: guarded writes
    with pytest.raises(LockError, match="already leads"):
        a.campaign(timeout=1)
    start = time.monotonic()
    with pytest.raises(NotAcquired):
        b.campaign(timeout=0.2)
    assert 0.19 <= time.monotonic() - start < 0.2 + SLACK
    with pytest.raises(NotAcquired):
        b.campaign(timeout=0)  # tries once
    assert a.resign() is True and a.leadership is None
    assert a.leader() is None and a.resign() is False
    # The default identity: host:pid:uuid4, one per Election.
    host, pid, uid = b.identity.split(":")
    assert host == socket.gethostname() and pid.isdigit() and len(uid) == 36
    assert Election(r, key).identity != b.identity
    with b.campaign(timeout=1) as leadership:  # a context manager: resigns at the end
        assert b.leader() == Leader(b.identity, leadership.fence)
        assert leadership.fence > hold.fence
    assert b.leader() is None and b.leadership is None
    r.delete(key + ":data")


def test_next_candidate_elected_when_the_leader_resigns(r, key):
    a, b = Election(r, key, identity="a"), Election(r, key, identity="b")
    first = a.campaign()
    box = {}
    t = threading.Thread(target=lambda: box.update(hold=b.campaign(timeout=5)))
    t.start()
    wait_for(lambda: (a.info() or None) and a.info().waiters == 1)
    resigned_at = time.monotonic()
    a.resign()
    t.join(5)
    assert time.monotonic() - resigned_at < 0.5
    second = box["hold"]
    assert second.fence > first.fence and b.leader() == Leader("b", second.fence)
    assert b.resign() is True


def test_next_candidate_elected_when_the_lease_ends(r, key):
    # A leader that stops extending (a process that hangs, or died) is replaced at the end of
    # its lease: the waiting candidate is granted at that instant.
    a = Election(r, key, ttl=TTL, identity="a", auto_extend=False)
    b = Election(r, key, ttl=TTL, identity="b")
    first = a.campaign()
    elected_at = time.monotonic()
    second = b.campaign(timeout=5)
    assert TTL - 0.05 <= time.monotonic() - elected_at < TTL + SLACK
    assert first.lost.wait(1) and a.leadership is first  # lost, not yet released
    assert b.leader() == Leader("b", second.fence) and second.fence > first.fence
    # Campaigning again releases the lost leadership first, then queues behind b.
    with pytest.raises(NotAcquired):
        a.campaign(timeout=0.1)
    assert a.leadership is None and first.release() is False
    b.resign()
    again = a.campaign(timeout=1)
    assert again.fence > second.fence and a.leader() == Leader("a", again.fence)
    time.sleep(TTL / 2)
    assert first.release() is False and a.leader() == Leader("a", again.fence)
    a.resign()


def test_observe_sees_each_change_in_order(r, key):
    a, b, c = (Election(r, key, identity=n) for n in "abc")
    follower = Follower(Election(r, key), 9)
    assert follower.wait(1) is None  # nobody leads yet: said at once
    wait_for(lambda: observing(r) >= 1)
    ha = a.campaign()  # a grant to a free key
    assert follower.wait(2) == Leader("a", ha.fence)
    a.resign()  # a release with nobody waiting
    assert follower.wait(3) is None
    hb = b.campaign()
    assert follower.wait(4) == Leader("b", hb.fence)
    box = {}
    t = threading.Thread(target=lambda: box.update(hold=c.campaign(timeout=5)))
    t.start()
    wait_for(lambda: a.info().waiters == 1)
    b.resign()  # a hand-off from the queue: one change, straight from b to c
    t.join(5)
    hc = box["hold"]
    fc = hc.fence
    assert follower.wait(5) == Leader("c", fc)
    new = hc.new_fence()  # the same leader under a new fence
    assert follower.wait(6) == Leader("c", new)
    r.execute_command("LOCK.EXTEND", key, "c", 1)  # c's lease ends
    assert follower.wait(7) is None
    hb2 = b.campaign()
    assert follower.wait(8) == Leader("b", hb2.fence)
    r.delete(key)  # the key deleted under the leader
    assert follower.join() == [
        None,
        Leader("a", ha.fence),
        None,
        Leader("b", hb.fence),
        Leader("c", fc),
        Leader("c", new),
        None,
        Leader("b", hb2.fence),
        None,
    ]
    assert_in_fence_order(follower.seen)
    wait_for(lambda: observing(r) == 0)  # leaving the loop closed its connection
    b.resign()
    hc.release()


def _observe_calls(r):
    return r.info("commandstats").get("cmdstat_lock.observe", {}).get("calls", 0)


def test_observe_waits_on_a_key_held_shared(r, key):
    """Shared holds lead nobody. Once the newest of them ends, LOCK.INFO's fence (the last
    issued) is above the key's state: observe() must not pass it as `seen`, or every call
    would answer at once."""
    rw = ReadWriteLock(r, key, ttl=30)
    first, second = rw.read.acquire(), rw.read.acquire()
    follower = Follower(Election(r, key), 3)
    assert follower.wait(1) is None
    second.release()  # the newest shared hold ends: a change, and no leader
    wait_for(lambda: observing(r) == 1)
    calls = _observe_calls(r)
    time.sleep(0.3)
    assert _observe_calls(r) - calls <= 1 and observing(r) == 1
    first.release()
    writer = Election(r, key, identity="w").campaign(timeout=1)
    assert follower.wait(2) == Leader("w", writer.fence)
    writer.release()
    assert follower.join() == [None, Leader("w", writer.fence), None]


def test_observe_ends_at_its_timeout(r, key):
    start = time.monotonic()
    follower = Follower(Election(r, key), 10, timeout=0.5, block=0.1)
    seen = follower.join()
    # The first value, then nothing: five LOCK.OBSERVE calls answered by their timeout with
    # the unchanged state yield nothing.
    assert seen == [None]
    assert 0.5 <= time.monotonic() - start < 0.5 + SLACK
    hold = Election(r, key, identity="x").campaign()
    seen = Follower(Election(r, key), 10, timeout=0.3).join()
    assert seen == [Leader("x", hold.fence)]
    hold.release()
    with pytest.raises(ValueError):
        Election(r, key).observe(block=0)


class Recorder(Proxy):
    """A Proxy that also keeps all that clients send, one buffer per connection."""

    def __init__(self, target_port):
        super().__init__(target_port)
        self.sent = []  # in accept order

    def _up(self, src, dst):
        buffer = bytearray()
        self.sent.append(buffer)
        return super()._up(_Tapped(src, buffer), dst)

    def observes(self, connection):
        """The ``seen`` argument of each LOCK.OBSERVE sent on a connection."""
        return [int(m) for m in re.findall(
            rb"LOCK\.OBSERVE\r\n\$\d+\r\n[^\r]*\r\n\$\d+\r\n(\d+)\r\n", self.sent[connection]
        )]


class _Tapped:
    def __init__(self, sock, buffer):
        self._sock, self._buffer = sock, buffer

    def recv(self, n):
        data = self._sock.recv(n)
        self._buffer.extend(data)
        return data

    def __getattr__(self, name):
        return getattr(self._sock, name)


def _observer_ids(r):
    return [c["id"] for c in r.client_list() if c["cmd"] == "lock.observe"]


def test_observe_resumes_from_the_last_fence_after_a_dropped_connection(server, protocol, key):
    proxy = Recorder(server.port)
    direct = server.client(protocol=protocol)
    via_proxy = Election(_client(proxy.port, protocol), key)
    hold = Election(direct, key, identity="a").campaign()
    follower = Follower(via_proxy, 3)
    assert follower.wait(1) == Leader("a", hold.fence)
    wait_for(lambda: len(_observer_ids(direct)) == 1)
    [first_id] = _observer_ids(direct)
    connections = len(proxy.sent)
    direct.client_kill_filter(_id=first_id)
    # It reconnects and blocks again, on the fence it last saw: not a value yielded twice,
    # not an answer at once.
    wait_for(lambda: _observer_ids(direct) not in ([], [first_id]))
    assert len(proxy.sent) == connections + 1
    assert proxy.observes(connections) == [hold.fence]
    assert follower.seen == [Leader("a", hold.fence)]
    hold.release()
    assert follower.wait(2) is None
    second = Election(direct, key, identity="b").campaign()
    assert follower.wait(3) == Leader("b", second.fence)
    follower.join()
    second.release()
    proxy.close()
    direct.close()


def _client(port, protocol):
    return redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=10)


def test_observe_outlives_a_server_restart(fresh_server, protocol, key):
    r = fresh_server.client(protocol=protocol)
    hold = Election(r, key, ttl=30, identity="a").campaign()
    follower = Follower(Election(fresh_server.client(protocol=protocol), key), 3, timeout=20)
    assert follower.wait(1) == Leader("a", hold.fence)
    wait_for(lambda: observing(r) == 1)
    fresh_server.pause()
    time.sleep(0.3)  # the follower's reads wait on a server that does not answer
    fresh_server.restart()  # a crash: the lock is gone with the data
    assert follower.wait(2, timeout=10) is None  # reconnected, with backoff: nobody leads
    r = fresh_server.client(protocol=protocol)
    second = Election(r, key, identity="b").campaign()
    assert follower.wait(3) == Leader("b", second.fence)
    assert second.fence > hold.fence  # fences never go backwards across a restart
    follower.join()
    second.release()
    hold.release()  # the crash took it: nothing to release


def test_observe_follows_a_failover(tmp_path, protocol, key):
    """The follower's address (a proxy, as a virtual IP would be) moves from the master to its
    promoted replica: the follower resumes there from the last fence it saw, which the
    replica has too, and yields the next leader, elected on the new master."""
    master = replica = proxy = None
    try:
        master = Server(tmp_path / "master", "--repl-diskless-sync-delay", "0").start()
        replica = replica_of(master, tmp_path / "replica")
        proxy = Recorder(master.port)
        m = master.client(protocol=protocol)
        # durable=1: the replica has the grant before campaign() returns (WAIT 1 on the
        # connection that got it).
        hold = Election(m, key, ttl=30, identity="a", durable=1).campaign(timeout=1)
        follower = Follower(Election(_client(proxy.port, protocol), key), 3, timeout=20)
        assert follower.wait(1) == Leader("a", hold.fence)
        wait_for(lambda: observing(m) == 1)
        connections = len(proxy.sent)
        rr = replica.client(protocol=protocol)
        rr.execute_command("REPLICAOF", "NO", "ONE")
        proxy.target_port = replica.port
        master.kill()  # the follower's connection breaks with it
        wait_for(lambda: observing(rr) == 1, 10)
        assert proxy.observes(len(proxy.sent) - 1) == [hold.fence]
        assert len(proxy.sent) > connections and follower.seen == [Leader("a", hold.fence)]
        rr.execute_command("LOCK.RELEASE", key, "a")
        assert follower.wait(2) is None
        second = Election(rr, key, identity="b").campaign(timeout=1)
        assert follower.wait(3) == Leader("b", second.fence)
        assert_in_fence_order(follower.join())
        second.release()
    finally:
        if proxy is not None:
            proxy.close()
        for s in (replica, master):
            if s is not None:
                s.kill()


def test_observe_never_goes_back_after_a_failover_to_a_replica_behind(tmp_path, protocol, key):
    """The follower saw b lead; the replica promoted next never saw b, only a, under a smaller
    fence: a is not yielded again (nor at all), and what the new master does next is."""
    master = replica = proxy = None
    try:
        master = Server(tmp_path / "master", "--repl-diskless-sync-delay", "0").start()
        replica = replica_of(master, tmp_path / "replica")
        proxy = Proxy(master.port)
        m, rr = master.client(protocol=protocol), replica.client(protocol=protocol)
        a = Election(m, key, ttl=30, identity="a", durable=1).campaign(timeout=1)
        follower = Follower(Election(_client(proxy.port, protocol), key), 5, timeout=20)
        assert follower.wait(1) == Leader("a", a.fence)
        rr.execute_command("REPLICAOF", "NO", "ONE")  # cut off: it will not see b
        a.release()
        b = Election(m, key, ttl=30, identity="b").campaign(timeout=1)
        assert follower.wait(3) == Leader("b", b.fence)  # after None: a released
        proxy.target_port = replica.port
        master.kill()
        wait_for(lambda: observing(rr) == 1, 10)  # resumed there, a's fence skipped
        assert follower.seen == [Leader("a", a.fence), None, Leader("b", b.fence)]
        rr.execute_command("LOCK.RELEASE", key, "a")
        assert follower.wait(4) is None  # after b, nobody leads: a change
        c = Election(rr, key, identity="c").campaign(timeout=1)
        assert follower.wait(5) == Leader("c", c.fence) and c.fence > b.fence
        follower.join()
        c.release()
    finally:
        if proxy is not None:
            proxy.close()
        for s in (replica, master):
            if s is not None:
                s.kill()


# -- RedisCluster ------------------------------------------------------------------------------


def test_cluster_election_and_observe(cluster_nodes, protocol):
    key = "{election}:leader"
    rc = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port, protocol=protocol)
    owner = rc.get_node_from_key(key)
    direct = next(n.client() for n in cluster_nodes if n.port == owner.port)
    a, b = Election(rc, key, identity="a"), Election(rc, key, identity="b")
    follower = Follower(Election(rc, key), 4)
    assert follower.wait(1) is None
    wait_for(lambda: observing(direct) == 1)  # on the master of the key's slot
    first = a.campaign(timeout=1)
    assert follower.wait(2) == Leader("a", first.fence) == b.leader()
    box = {}
    t = threading.Thread(target=lambda: box.update(hold=b.campaign(timeout=5)))
    t.start()
    wait_for(lambda: a.info().waiters == 1)
    a.resign()
    t.join(5)
    assert follower.wait(3) == Leader("b", box["hold"].fence)
    b.resign()
    assert follower.join() == [None, Leader("a", first.fence), Leader("b", box["hold"].fence), None]
    rc.close()


def test_async_cluster_election_and_observe(cluster_nodes, protocol):
    key = "{election}:async"

    async def main():
        rc = AsyncRedisCluster(host="127.0.0.1", port=cluster_nodes[0].port, protocol=protocol)
        a, b = async_api.Election(rc, key, identity="a"), async_api.Election(rc, key)
        follower = AsyncFollower(async_api.Election(rc, key), 3)
        assert await follower.wait(1) is None
        first = await a.campaign(timeout=1)
        assert await follower.wait(2) == Leader("a", first.fence) == await b.leader()
        await a.resign()
        assert await follower.join() == [None, Leader("a", first.fence), None]
        await rc.aclose()

    run(main())


# -- asyncio -----------------------------------------------------------------------------------


class AsyncFollower:
    """``Follower`` for the asyncio API: a task that iterates ``observe()``."""

    def __init__(self, election, count, **options):
        options.setdefault("timeout", 10)
        self.seen = []
        self.count = count
        self.task = asyncio.ensure_future(self._run(election.observe(**options)))

    async def _run(self, gen):
        async for value in gen:
            self.seen.append(value)
            if len(self.seen) == self.count:
                break
        await gen.aclose()

    async def wait(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while len(self.seen) < n and not self.task.done():
            assert time.monotonic() < deadline, f"only {self.seen}"
            await asyncio.sleep(0.005)
        if len(self.seen) < n:
            self.task.result()  # raises what ended it
            raise AssertionError(f"ended after {self.seen}")
        return self.seen[n - 1]

    async def join(self, timeout=10.0):
        await asyncio.wait_for(self.task, timeout)
        return self.seen


def _aclient(port, protocol):
    return aredis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=10)


def test_async_campaign_leader_resign(server, protocol, key):
    async def main():
        r = _aclient(server.port, protocol)
        a = async_api.Election(r, key, identity="a")
        b = async_api.Election(r, key, ttl=TTL, identity="b", auto_extend=False)
        assert await a.leader() is None
        async with a.campaign(timeout=1) as first:
            assert first.token == "a" and a.leadership is first
            assert await b.leader() == Leader("a", first.fence)
            with pytest.raises(LockError, match="already leads"):
                await a.campaign()
            start = time.monotonic()
            with pytest.raises(NotAcquired):
                await b.campaign(timeout=0.2)
            assert 0.19 <= time.monotonic() - start < 0.2 + SLACK
            waiting = asyncio.ensure_future(b.campaign(timeout=5))
            while (await a.info()).waiters != 1:
                await asyncio.sleep(0.005)
        second = await asyncio.wait_for(waiting, 0.5)  # a resigned leaving the block
        assert await a.leader() == Leader("b", second.fence) and second.fence > first.fence
        # b does not extend: at the end of its lease, the next candidate leads.
        elected_at = time.monotonic()
        third = await a.campaign(timeout=5)
        assert TTL - 0.05 <= time.monotonic() - elected_at < TTL + SLACK
        assert second.lost.is_set() and third.fence > second.fence
        assert await a.resign() is True and await a.leader() is None
        assert await a.resign() is False
        await r.aclose()

    run(main())


def test_async_observe_in_order_and_timeout(server, protocol, key):
    async def main():
        r = _aclient(server.port, protocol)
        a, b = async_api.Election(r, key, identity="a"), async_api.Election(r, key, identity="b")
        follower = AsyncFollower(async_api.Election(r, key), 5)
        assert await follower.wait(1) is None
        ha = await a.campaign()
        assert await follower.wait(2) == Leader("a", ha.fence)
        waiting = asyncio.ensure_future(b.campaign(timeout=5))
        while (await a.info()).waiters != 1:
            await asyncio.sleep(0.005)
        await a.resign()
        hb = await waiting
        fb = hb.fence
        assert await follower.wait(3) == Leader("b", fb)
        new = await hb.new_fence()
        assert await follower.wait(4) == Leader("b", new)
        await r.delete(key)
        assert await follower.join() == [
            None, Leader("a", ha.fence), Leader("b", fb), Leader("b", new), None
        ]
        start = time.monotonic()
        quiet = AsyncFollower(async_api.Election(r, key), 10, timeout=0.5, block=0.1)
        assert await quiet.join() == [None]
        assert 0.5 <= time.monotonic() - start < 0.5 + SLACK
        await hb.release()
        await r.aclose()

    run(main())


def test_async_observe_resumes_from_the_last_fence(server, protocol, key):
    async def main():
        proxy = Recorder(server.port)
        direct = server.client(protocol=protocol)
        hold = Election(direct, key, identity="a").campaign()
        r = _aclient(proxy.port, protocol)
        follower = AsyncFollower(async_api.Election(r, key), 3)
        assert await follower.wait(1) == Leader("a", hold.fence)
        while len(_observer_ids(direct)) != 1:
            await asyncio.sleep(0.005)
        [first_id] = _observer_ids(direct)
        connections = len(proxy.sent)
        direct.client_kill_filter(_id=first_id)
        while _observer_ids(direct) in ([], [first_id]):
            await asyncio.sleep(0.005)
        assert len(proxy.sent) == connections + 1
        assert proxy.observes(connections) == [hold.fence]
        assert follower.seen == [Leader("a", hold.fence)]
        hold.release()
        assert await follower.wait(2) is None
        second = Election(direct, key, identity="b").campaign()
        assert await follower.wait(3) == Leader("b", second.fence)
        await follower.join()
        second.release()
        await r.aclose()
        proxy.close()
        direct.close()

    run(main())
