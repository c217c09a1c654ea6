"""A fleet on one machine: `kvtier serve` nodes and a Redis Cluster, each process in a network
namespace of its own, joined by veth links to one bridge (issue 16, docs/cluster.md).

    hub namespace: bridge br0
      |-- node0 .. nodeN-1   10.77.<net>.100+i   kvtier serve (tiers: a small DRAM, the shared pool)
      |-- redis0 .. redisM-1 10.77.<net>.10+j    redis-server, cluster mode; masters first,
                                                 then one replica per master
      |-- client             10.77.<net>.200     nothing of its own: where a driver that needs the
                                                 network (kvtier bench cluster) runs

Every address lives inside namespaces this module creates, named `kvt<pid>-*`, and `close()`
(also run at exit and on SIGTERM/SIGINT) kills every process it started and deletes every
namespace. The daemons listen on Unix sockets only: a Unix socket is a file, so a driver in the
root namespace reaches every node while the nodes reach Redis only through their links. Each
node also listens on TCP at its own address (`NODE_TCP_PORT`), which a driver in the client
namespace reaches over the bridge (`node_endpoint(i, tcp=True)`): with TLS, as a node requires
of TCP that other hosts can reach, under a certificate for every node's address that this
module makes (`tls_ca`), and an auth token (`auth_token`) that every client, on either
transport, must give.

Every Redis node requires a password (requirepass, masterauth for the replicas), generated per
topology and given to the nodes' remote tiers.

Needs root (network namespaces), `ip`, `openssl`, `redis-server`, `redis-cli` and `redis-benchmark`.
"""

import atexit
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

REDIS_PORT = 6379
NODE_TCP_PORT = 7070


class TopologyError(RuntimeError):
    pass


def unavailable_reason():
    """Why this machine cannot build a topology, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "openssl", "redis-server", "redis-cli", "redis-benchmark"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    probe = f"kvt{os.getpid()}-probe"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "cannot create a network namespace (`ip netns add` failed)"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(args, check=True):
    done = subprocess.run(args, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise TopologyError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


class Topology:
    def __init__(self, kvtier, nodes=3, masters=3, replicas_per_master=1, dram_bytes=4 << 20,
                 pool_bytes=256 << 20, node_config_extra=""):
        self.kvtier = os.path.abspath(kvtier)
        self.prefix = f"kvt{os.getpid()}"
        self.net = os.getpid() % 250 + 1  # the third octet: two topologies at once stay apart
        self.dir = tempfile.mkdtemp(prefix="kvtier-cluster-")
        self.namespaces = []
        self.links = {}  # member namespace -> its veth end in the hub
        self.redis = []  # {"ns", "addr", "proc"}
        self.nodes = []  # {"ns", "addr", "proc", "socket", "config", "log"}
        self.dram_bytes = dram_bytes
        self.pool_bytes = pool_bytes
        self.node_config_extra = node_config_extra
        self.password = secrets.token_hex(16)  # requirepass of every Redis node, masterauth of replicas
        self.auth_token = secrets.token_hex(16)  # every node's auth_token
        self.tls_ca = os.path.join(self.dir, "nodes.pem")  # the nodes' certificate, self-signed: its own CA
        self.tls_key = os.path.join(self.dir, "nodes.key")
        self._closed = False
        atexit.register(self.close)
        self._old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._make_hub()
            for j in range(masters * (1 + replicas_per_master)):
                self._start_redis(j)
            self._create_cluster(masters, replicas_per_master)
            self._make_certificate([f"10.77.{self.net}.{100 + i}" for i in range(nodes)])
            for i in range(nodes):
                _, addr = self._add_member(f"node{i}", 100 + i)
                self._write_node_config(i, addr)
                self.start_node(i)
            self._add_member("client", 200)
        except BaseException:
            self.close()
            raise

    # --- links ---------------------------------------------------------------------------------

    def _ns(self, name):
        return f"{self.prefix}-{name}"

    def _exec(self, ns, args):
        return ["ip", "netns", "exec", ns] + args

    def _make_hub(self):
        hub = self._ns("hub")
        _run(["ip", "netns", "add", hub])
        self.namespaces.append(hub)
        _run(["ip", "-n", hub, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", hub, "link", "set", "br0", "up"])

    def _add_member(self, name, host):
        ns = self._ns(name)
        _run(["ip", "netns", "add", ns])
        self.namespaces.append(ns)
        index = len(self.links)
        hub_end, member_end = f"k{os.getpid() % 100000}h{index}", f"k{os.getpid() % 100000}m{index}"
        _run(["ip", "link", "add", hub_end, "type", "veth", "peer", "name", member_end])
        _run(["ip", "link", "set", hub_end, "netns", self._ns("hub")])
        _run(["ip", "link", "set", member_end, "netns", ns])
        _run(["ip", "-n", ns, "link", "set", member_end, "name", "eth0"])
        _run(["ip", "-n", ns, "addr", "add", f"10.77.{self.net}.{host}/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", self._ns("hub"), "link", "set", hub_end, "master", "br0", "up"])
        self.links[ns] = hub_end
        return ns, f"10.77.{self.net}.{host}"

    def exec_in(self, member, args):
        """`args` as a command line run in `member`'s namespace ("client", "node1")."""
        return self._exec(self._ns(member), args)

    def set_link(self, member, up):
        """Takes a member's link to the bridge down or up (`member`: "node1", "redis0")."""
        ns = self._ns(member)
        _run(["ip", "-n", self._ns("hub"), "link", "set", self.links[ns], "up" if up else "down"])

    # --- Redis ---------------------------------------------------------------------------------

    def _start_redis(self, j):
        ns, addr = self._add_member(f"redis{j}", 10 + j)
        work = os.path.join(self.dir, f"redis{j}")
        os.makedirs(work)
        log = open(os.path.join(work, "redis.log"), "w")
        proc = subprocess.Popen(self._exec(ns, [
            "redis-server", "--port", str(REDIS_PORT), "--bind", addr, "--protected-mode", "no",
            "--cluster-enabled", "yes", "--cluster-config-file", os.path.join(work, "nodes.conf"),
            "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
            "--save", "", "--appendonly", "no", "--dir", work, "--repl-diskless-sync-delay", "0",
            "--requirepass", self.password, "--masterauth", self.password,
            "--maxmemory", str(self.pool_bytes), "--maxmemory-policy", "allkeys-lru"]),
            stdout=log, stderr=subprocess.STDOUT)
        self.redis.append({"ns": ns, "addr": addr, "proc": proc, "name": f"redis{j}"})
        self._wait(lambda: self.redis_cli(j, ["PING"], check=False).stdout.strip() == "PONG",
                   f"redis{j} to answer PING")

    def redis_cli(self, j, args, check=True):
        r = self.redis[j]
        return _run(self._exec(r["ns"], ["redis-cli", "-h", r["addr"], "-p", str(REDIS_PORT), "-a", self.password,
                                          "--no-auth-warning"] + args), check)

    def _create_cluster(self, masters, replicas):
        endpoints = [f"{r['addr']}:{REDIS_PORT}" for r in self.redis]
        _run(self._exec(self.redis[0]["ns"], ["redis-cli", "-a", self.password, "--no-auth-warning", "--cluster",
                                               "create", *endpoints, "--cluster-replicas", str(replicas),
                                               "--cluster-yes"]))
        for j in range(len(self.redis)):
            self._wait(lambda j=j: "cluster_state:ok" in self.redis_cli(j, ["CLUSTER", "INFO"], check=False).stdout,
                       f"redis{j} to report cluster_state:ok")
        # A replica that has not finished its first sync cannot take over: a master killed
        # before then would stay down.
        for j in range(masters, len(self.redis)):
            self._wait(lambda j=j: "master_link_status:up" in self.redis_cli(j, ["INFO", "replication"], check=False).stdout,
                       f"redis{j} to finish its first sync")

    def redis_role(self, j):
        lines = self.redis_cli(j, ["ROLE"], check=False).stdout.split()
        return lines[0] if lines else "down"

    def redis_benchmark_get(self, member, value_bytes, requests=20000):
        """GET requests/s of redis-benchmark run in `member`'s namespace against the cluster
        (SET first, so that every GET returns a value of `value_bytes`)."""
        out = _run(self._exec(self._ns(member), [
            "redis-benchmark", "--cluster", "-h", self.redis[0]["addr"], "-p", str(REDIS_PORT), "-a", self.password,
            "-t", "set,get", "-d", str(value_bytes), "-n", str(requests), "-c", "8", "-P", "8", "-r", "1000",
            "--csv"])).stdout
        for line in out.splitlines():
            if line.startswith('"GET"'):
                return float(line.split(",")[1].strip('"'))
        raise TopologyError(f"redis-benchmark printed no GET line:\n{out}")

    def masters(self):
        return [j for j in range(len(self.redis)) if self.redis[j]["proc"].poll() is None and self.redis_role(j) == "master"]

    def flush_pool(self):
        """Empties every master (their replicas follow): a check that needs the pool's room."""
        for j in self.masters():
            self.redis_cli(j, ["FLUSHALL"])

    def redis_endpoints(self):
        return [f"{r['addr']}:{REDIS_PORT}" for r in self.redis]

    def redis_pid(self, j):
        return self.redis[j]["proc"].pid  # `ip netns exec` execs redis-server: the same process

    def replicated_master(self):
        """A live master with a replica in sync: one whose death a replica takes over."""
        for j in self.masters():
            if "connected_slaves:0" not in self.redis_cli(j, ["INFO", "replication"], check=False).stdout:
                return j
        raise TopologyError("no master has a replica left")

    def kill_redis(self, j):
        self._kill(self.redis[j]["proc"])

    # --- kvtier nodes --------------------------------------------------------------------------

    def _make_certificate(self, addresses):
        san = ",".join(f"IP:{a}" for a in addresses)
        _run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
              "-days", "1", "-subj", "/CN=kvtier-cluster-test", "-addext", f"subjectAltName={san}",
              "-keyout", self.tls_key, "-out", self.tls_ca])

    def _write_node_config(self, i, addr):
        work = os.path.join(self.dir, f"node{i}")
        os.makedirs(work)
        endpoints = ", ".join(f"{r['addr']}:{REDIS_PORT}" for r in self.redis)
        config = os.path.join(work, "serve.yaml")
        with open(config, "w") as f:
            f.write(f"""data_dir: {work}
tiers:
  - kind: cpu_dram
    capacity: {self.dram_bytes}B
    lock_memory: false
    huge_pages: false
  - kind: remote_pool
    name: pool
    topology: cluster
    capacity: {self.pool_bytes}B
    timeout_ms: 500
    reconnect_interval_ms: 200
    shared: true
    password: {self.password}
    endpoints: [{endpoints}]
store:
  policy: lru
  persistence: none
listen:
  unix_socket: kvtier.sock
  tcp: true
  tcp_host: {addr}
  tcp_port: {NODE_TCP_PORT}
  tls:
    cert: {self.tls_ca}
    key: {self.tls_key}
  metrics_port: -1
auth_token: {self.auth_token}
limits:
  io_timeout_ms: 5000
{self.node_config_extra}""")
        self.nodes.append({"ns": self._ns(f"node{i}"), "addr": addr, "proc": None, "config": config,
                           "socket": os.path.join(work, "kvtier.sock"), "log": os.path.join(work, "serve.log")})

    def start_node(self, i):
        node = self.nodes[i]
        if os.path.exists(node["socket"]):
            os.unlink(node["socket"])  # a SIGKILLed daemon leaves its socket file
        log = open(node["log"], "a")
        node["proc"] = subprocess.Popen(self._exec(node["ns"], [self.kvtier, "serve", "--config", node["config"]]),
                                        stdout=log, stderr=subprocess.STDOUT)
        self._wait(lambda: os.path.exists(node["socket"]) or node["proc"].poll() is not None,
                   f"node{i} to listen")
        if node["proc"].poll() is not None:
            raise TopologyError(f"node{i} exited while starting; its log:\n{self.node_log(i)}")

    def kill_node(self, i):
        self._kill(self.nodes[i]["proc"])

    def node_socket(self, i):
        return self.nodes[i]["socket"]

    def node_endpoint(self, i, tcp):
        """What `kvtier bench cluster --nodes` takes: the Unix socket (from any namespace), or
        host:port over the bridge (from the client namespace)."""
        return f"{self.nodes[i]['addr']}:{NODE_TCP_PORT}" if tcp else self.nodes[i]["socket"]

    def node_log(self, i, tail=4000):
        with open(self.nodes[i]["log"]) as f:
            return f.read()[-tail:]

    # --- life --------------------------------------------------------------------------------

    @staticmethod
    def _wait(ready, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise TopologyError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.05)

    @staticmethod
    def _kill(proc):
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def _on_signal(self, signum, frame):
        self.close()
        raise SystemExit(128 + signum)

    def close(self):
        if self._closed:
            return
        self._closed = True
        for member in self.nodes + self.redis:
            self._kill(member.get("proc"))
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        for s, handler in self._old_handlers.items():
            signal.signal(s, handler)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
