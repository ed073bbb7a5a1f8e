"""redis-server processes with the module loaded, for the tests: on free loopback ports in
41000-49999 (other suites of the project use 20000-39999), in temp dirs, killed by PID."""

from __future__ import annotations

import atexit
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[3]
MODULE = os.environ.get("REDIS_LOCK_MODULE") or str(REPO / "target/release/libredis_lock.so")
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
REDIS_CLI = os.environ.get("REDIS_CLI", "redis-cli")
PORTS = range(41000, 50000)
_running: set = set()  # every server started, killed at exit if a teardown never ran


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster: bool = False) -> int:
    for _ in range(200):
        port = random.choice(PORTS)
        # A cluster node also listens on port + 10000 (its bus).
        if _free(port) and (not cluster or _free(port + 10000)):
            return port
    raise RuntimeError("no free port in 41000-49999")


class Server:
    def __init__(self, workdir: Path, *args: str, cluster: bool = False):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args, self.cluster = list(args), cluster
        self.port = None
        self.proc = None

    def start(self, port=None):
        # The ephemeral port range (32768-60999 here) overlaps ours: a port found free can
        # be taken by someone's outgoing connection before redis binds it. Try another.
        for _ in range(10):
            self.port = port or free_port(self.cluster)
            if self._spawn():
                return self
            if port:
                break
        raise RuntimeError(f"redis-server did not start; see {self.dir / 'redis.log'}")

    def _spawn(self) -> bool:
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", str(self.dir), "--save", "", "--appendonly", "no",
               "--logfile", str(self.dir / "redis.log"), "--loadmodule", MODULE, *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _running.add(self)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with redis.Redis(port=self.port, socket_timeout=0.5) as r:
                    if r.ping():
                        return True
            except redis.ConnectionError:
                time.sleep(0.02)
        self.kill()
        return False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, **kwargs) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def pause(self):
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.pid, signal.SIGCONT)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)  # a stopped process dies all the same; be sure
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()
        _running.discard(self)

    def restart(self):
        """A crash and a restart on the same port: no data survives (no RDB, no AOF)."""
        self.kill()
        return self.start(self.port)


@atexit.register
def _kill_all():
    for server in list(_running):
        server.kill()


def wait_for(predicate, timeout=5.0, every=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {predicate}")


def replica_of(master: Server, workdir: Path) -> Server:
    replica = Server(workdir, "--replicaof", "127.0.0.1", str(master.port)).start()
    with replica.client() as r:
        wait_for(lambda: r.info("replication").get("master_link_status") == "up", 10)
    return replica


def cluster(workdir: Path, masters: int = 3):
    nodes = [
        Server(Path(workdir) / f"node{i}", "--cluster-enabled", "yes",
               "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
               cluster=True).start()
        for i in range(masters)
    ]
    addresses = [f"127.0.0.1:{n.port}" for n in nodes]
    subprocess.run([REDIS_CLI, "--cluster", "create", *addresses, "--cluster-yes"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    for n in nodes:
        with n.client() as r:
            wait_for(lambda: r.cluster("info")["cluster_state"] == "ok", 20, 0.05)
    return nodes
