"""Fixtures: real redis-server processes with the module (see servers.py), and clients of
both protocols. No mocks: every test talks to a server."""

from __future__ import annotations

import shutil
import uuid

import pytest
from servers import Server, cluster, replica_of

@pytest.fixture(scope="session")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("shared")).start()
    yield s
    s.kill()


@pytest.fixture
def fresh_server(tmp_path):
    """A server of the test's own, for tests that pause, restart or reconfigure it."""
    s = Server(tmp_path / "fresh").start()
    yield s
    s.kill()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request):
    return request.param


@pytest.fixture
def r(server, protocol):
    client = server.client(protocol=protocol)
    yield client
    client.close()


@pytest.fixture
def key(request):
    # One key per test: a keep-alive left over from a failed test cannot touch another's.
    return f"test:{request.node.name}:{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    """A master with one replica, both with the module; the replica is ``master.replica``
    (a test that pauses it resumes it)."""
    base = tmp_path_factory.mktemp("replicated")
    # No 5 s pause before the first (diskless) full sync.
    master = Server(base / "master", "--repl-diskless-sync-delay", "0").start()
    replica = master.replica = replica_of(master, base / "replica")
    yield master
    replica.kill()
    master.kill()


@pytest.fixture(scope="session")
def cluster_nodes(tmp_path_factory):
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is needed to create a cluster")
    nodes = cluster(tmp_path_factory.mktemp("cluster"))
    yield nodes
    for n in nodes:
        n.kill()
