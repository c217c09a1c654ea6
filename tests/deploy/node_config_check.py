"""deploy/kvtier-node.yaml loads: `kvtier serve --config` starts on it, listens where it says,
answers /healthz, and exits 0 on SIGTERM.

    node_config_check.py KVTIER_CLI NODE_CONFIG

`kvtier serve` has no dry-run option, so the daemon really starts, on a copy with only what a
test machine cannot give changed: data_dir and the socket go to a temporary folder, every tier
capacity becomes 64MiB, and /metrics takes a free port (on the shipped host). Every other key
and value is the file as shipped (unknown keys and bad values fail the start; lock_memory is
best effort, so a low RLIMIT_MEMLOCK does not).
"""

import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import Daemon, fail  # noqa: E402


def substitute(text, key, value, at_least=1):
    """Replaces the value of every `key: value` line (keeping the indentation and comment)."""
    pattern = re.compile(rf"^(\s*(?:- )?{key}:\s*)([^#\n]*?)(\s*(?:#.*)?)$", re.M)
    text, n = pattern.subn(lambda m: m.group(1) + value + m.group(3), text)
    if n < at_least:
        fail(f"{key}: expected at least {at_least} line(s) in the node config, found {n}")
    return text


def main():
    cli, config = sys.argv[1:3]
    text = open(config).read()
    with tempfile.TemporaryDirectory(prefix="kvtier-node-") as tmp:
        sock = os.path.join(tmp, "run", "kvtier.sock")
        os.makedirs(os.path.dirname(sock))
        text = substitute(text, "data_dir", os.path.join(tmp, "data"))
        text = substitute(text, "capacity", "64MiB", at_least=2)
        text = substitute(text, "unix_socket", sock)
        text = substitute(text, "metrics_port", "0")
        text = substitute(text, "tcp_port", "0", at_least=0)
        copy = os.path.join(tmp, "kvtier-node.yaml")
        with open(copy, "w") as f:
            f.write(text)
        with Daemon([cli, "serve", "--config", copy]) as d:
            if d.socket_path != sock:
                fail(f"listening on {d.socket_path}, not on the configured {sock}")
            if not os.path.exists(sock):
                fail(f"no socket at {sock}")
            status, body = d.get("/healthz")
            print("/healthz:", status, body)
            if status != 200:
                fail("/healthz is not 200")
    print("ok")


if __name__ == "__main__":
    main()
