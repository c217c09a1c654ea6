"""Starts a real `kvtier serve` for the deploy and README tests and stops it with SIGTERM.

    with Daemon([cli, "serve", "--config", path]) as d:
        d.metrics_url   # "http://127.0.0.1:PORT" as the daemon printed it (None: metrics off)
        d.socket_path   # the Unix socket it listens on, as it printed it
        d.get("/metrics")

The daemon says where it listens on its first line of stdout:
    kvtier serve: 0 blocks recovered; listening on unix:/x/kvtier.sock; metrics http://127.0.0.1:9477/metrics
"""

import re
import select
import signal
import subprocess
import sys
import time
import urllib.request

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


class Daemon:
    def __init__(self, argv, cwd=None, start_timeout_s=30.0):
        self.argv = list(argv)
        self.cwd = cwd
        self.start_timeout_s = start_timeout_s
        self.proc = None
        self.banner = ""
        self.metrics_url = None
        self.socket_path = None

    def __enter__(self):
        print("starting: " + " ".join(self.argv), flush=True)
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        deadline = time.monotonic() + self.start_timeout_s
        while "listening on" not in self.banner:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                fail(f"kvtier serve printed no 'listening on' line within {self.start_timeout_s} s: {self.banner!r}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            line = self.proc.stdout.readline() if ready else ""
            if ready and not line:  # EOF: it exited
                self.proc.wait()
                fail(f"kvtier serve exited with {self.proc.returncode} before listening: {self.banner!r}")
            self.banner += line
        print(self.banner.strip(), flush=True)
        m = re.search(r"listening on unix:(\S+?);", self.banner)
        self.socket_path = m.group(1) if m else None
        m = re.search(r"metrics (http://[^/\s]+)/metrics", self.banner)
        self.metrics_url = m.group(1) if m else None
        return self

    def get(self, path, timeout=10):
        """(status, body) of GET path on the metrics endpoint."""
        if not self.metrics_url:
            fail("the daemon serves no /metrics")
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stop(self):
        """SIGTERM (the daemon drains and exits 0); returns its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            fail("kvtier serve did not exit within 60 s of SIGTERM")
        if out.strip():
            print(out.strip(), flush=True)
        return self.proc.returncode

    def __exit__(self, exc_type, exc, tb):
        rc = self.stop()
        if exc_type is None and rc not in (0, None):
            fail(f"kvtier serve exited with {rc} after SIGTERM (expected 0)")


def scrape_families(text):
    """{family: type} from the Prometheus text format's # TYPE lines."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            families[name] = kind.strip()
    return families
