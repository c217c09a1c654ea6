"""The README's quickstarts for serving engineers, taken from README.md itself (the fenced
blocks after `<!-- quickstart: NAME -->`) and checked as far as this machine allows:

    readme_quickstart_check.py README KVTIER_CLI PYTHON_DIR             # serve, vllm, sglang
    readme_quickstart_check.py README KVTIER_CLI PYTHON_DIR --vllm-venv # vLLM's own parser

- serve: the command runs (the CLI path is this build's, the --data-dir a temporary folder),
  listens on <data-dir>/kvtier.sock and on the metrics address the block's comment names,
  answers /healthz, and a kvtier.Client puts, looks up and gets two blocks through it.
- vllm / sglang: the engine command's JSON parses; the module path it names is a module of
  the kvtier package (found on PYTHON_DIR) defining the named class over the engine's base
  class; every extra-config key is one the class reads; the socket is the serve block's;
  vLLM's prefix hash algorithm is one kvtier hashes; PYTHONPATH names this build's package.
  Neither engine is started: that needs the engine installed (and for SGLang, a GPU).
- --vllm-venv: where CI's vLLM venv exists (tools/vllm/ci_e2e.sh; KVTIER_VLLM_VENV or the
  cache folder), the `vllm serve` arguments go through vLLM's own argument parser and
  EngineArgs, and vLLM's connector factory imports the connector class, as `vllm serve` does
  at start. Exits 77 (skipped) where the venv is missing.
"""

import ast
import hashlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import SKIP, Daemon, fail  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blocks(readme):
    """{name: text} of the fenced blocks marked `<!-- quickstart: name -->`."""
    found = {}
    for m in re.finditer(r"<!-- quickstart: (\w+) -->\s*\n```[^\n]*\n(.*?)\n```", readme, re.S):
        if m.group(1) in found:
            fail(f"two quickstart blocks named {m.group(1)}")
        found[m.group(1)] = m.group(2)
    return found


def commands(text):
    """The block as shell commands: [(env, argv)], continuation lines joined, comments dropped,
    `VAR=value cmd` and `export VAR=value` as env ($PWD: the repository root)."""
    text = text.replace("\\\n", " ")
    lines, current, quote, comment = [], "", None, False
    for ch in text:  # a newline ends a command unless it is inside quotes; # starts a comment
        if comment and ch != "\n":
            continue
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (not current or current[-1].isspace()):
            comment = True
            continue
        elif ch == "\n":
            lines.append(current)
            current, comment = "", False
            continue
        current += ch
    lines.append(current)
    out = []
    for line in lines:
        argv = shlex.split(line)
        if not argv:
            continue
        env = {}
        if argv[0] == "export":
            argv = argv[1:]
        while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
            key, _, value = argv.pop(0).partition("=")
            env[key] = value.replace("$PWD", REPO)
        out.append((env, argv))
    return out


def option(argv, name):
    if name not in argv or argv.index(name) + 1 >= len(argv):
        fail(f"{name} missing from: {' '.join(argv)}")
    return argv[argv.index(name) + 1]


def find(cmds, prefix, what):
    for env, argv in cmds:
        if argv[: len(prefix)] == prefix:
            return env, argv
    fail(f"the {what} quickstart has no `{' '.join(prefix)}` command")


def class_in_module(module, class_name, base):
    """Source of `module` (found on sys.path) after checking it defines class_name over base."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        fail(f"module {module} is not importable from {sys.path[0]}")
    source = open(spec.origin).read()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            if base not in bases:
                fail(f"{module}.{class_name} derives from {bases}, not {base}")
            return source
    fail(f"{module} ({spec.origin}) defines no class {class_name}")


def keys_read(source):
    """The extra-config keys a class reads: extra.get("key") / extra["key"]."""
    return set(re.findall(r"""\bextra(?:\.get\(|\[)\s*["'](\w+)["']""", source))


def check_pythonpath(env, python_dir, what):
    path = env.get("PYTHONPATH")
    if path is None:
        fail(f"the {what} quickstart sets no PYTHONPATH")
    if os.path.realpath(python_dir).endswith(os.path.join("build", "release", "python")):
        if os.path.realpath(path) != os.path.realpath(python_dir):
            fail(f"the {what} quickstart's PYTHONPATH {path} is not the build's package {python_dir}")
    else:
        print(f"{what}: PYTHONPATH {path} not compared (this build is not build/release)")


def check_serve(block, cli):
    """Runs the serve block; returns (socket path as the README names it, its block text)."""
    cmds = commands(block)
    if len(cmds) != 1:
        fail(f"the serve quickstart should be one command, not {len(cmds)}")
    env, argv = cmds[0]
    if os.path.basename(argv[0]) != "kvtier" or argv[1:2] != ["serve"]:
        fail(f"the serve quickstart does not run `kvtier serve`: {argv}")
    data_dir = option(argv, "--data-dir")
    m = re.search(r"(\d+\.\d+\.\d+\.\d+):(\d+)", block)
    if not m:
        fail("the serve quickstart names no metrics address (host:port)")
    host, port = m.group(1), int(m.group(2))
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the daemon: TIME_WAIT is no conflict
    try:
        probe.bind((host, port))
    except OSError as e:
        print(f"SKIPPED: {host}:{port}, the default metrics port, is taken on this machine ({e})")
        sys.exit(SKIP)
    finally:
        probe.close()
    import kvtier

    with tempfile.TemporaryDirectory(prefix="kvtier-quickstart-") as tmp:
        run_dir = os.path.join(tmp, os.path.basename(data_dir))
        run_argv = [os.path.abspath(cli)] + argv[1:]
        run_argv[run_argv.index("--data-dir") + 1] = run_dir
        with Daemon(run_argv, cwd=tmp) as d:
            want = os.path.join(run_dir, "kvtier.sock")
            if d.socket_path != want:
                fail(f"kvtier serve listens on {d.socket_path}, not {want}")
            if d.metrics_url != f"http://{host}:{port}":
                fail(f"metrics at {d.metrics_url}, not at {host}:{port} as the block says")
            status, body = d.get("/healthz")
            print("/healthz:", status, body)
            if status != 200:
                fail("/healthz is not 200")
            keys = kvtier.chain_keys(list(range(32)), 16)
            payloads = [bytes([i + 1]) * 4096 for i in range(2)]
            with kvtier.Client.connect_unix(d.socket_path, shared_memory_bytes=1 << 20) as c:
                shm = c.shared_memory
                for i, p in enumerate(payloads):
                    shm[i * 4096 : (i + 1) * 4096] = p
                c.put(keys, [shm[i * 4096 : (i + 1) * 4096] for i in range(2)])
                [(prefix, _, _, sizes)] = c.lookup([keys])
                out = [shm[8192 + i * 4096 : 8192 + (i + 1) * 4096] for i in range(2)]
                got = c.get(keys, out)
                if prefix != 2 or got != [4096, 4096] or [bytes(o) for o in out] != payloads:
                    fail(f"round trip through the socket: prefix {prefix}, sizes {got}")
            print("serve: listens, answers /healthz, round trip of 2 blocks through the socket: ok")
    return os.path.join(data_dir, "kvtier.sock")


def check_vllm(block, sock, python_dir):
    import kvtier

    cmds = commands(block)
    env, argv = find(cmds, ["vllm", "serve"], "vllm")
    pp_env = next((e for e, a in cmds if "PYTHONPATH" in e), env)
    check_pythonpath(pp_env, python_dir, "vllm")
    if not re.fullmatch(r"\d+", env.get("PYTHONHASHSEED", "")):
        fail("`vllm serve` runs without a fixed PYTHONHASHSEED (engines would not share keys)")
    algo = option(argv, "--prefix-caching-hash-algo")
    try:
        hashed = len(kvtier.chain_keys(list(range(32)), 16, algo))
    except Exception as e:  # kvtier's error for an unknown algorithm
        fail(f"kvtier does not hash blocks with --prefix-caching-hash-algo {algo}: {e}")
    if hashed != 2:
        fail(f"kvtier hashed {hashed} blocks of 32 tokens with {algo}")
    kv = json.loads(option(argv, "--kv-transfer-config"))
    source = class_in_module(kv["kv_connector_module_path"], kv["kv_connector"], "KVConnectorBase_V1")
    if kv.get("kv_role") not in ("kv_both", "kv_producer", "kv_consumer"):
        fail(f"kv_role {kv.get('kv_role')!r}")
    extra = kv.get("kv_connector_extra_config", {})
    unknown = set(extra) - keys_read(source)
    if unknown:
        fail(f"kv_connector_extra_config keys the connector never reads: {sorted(unknown)}")
    if extra.get("socket_path") != sock:
        fail(f"vLLM's socket_path {extra.get('socket_path')} is not the daemon's {sock}")
    print(f"vllm: {kv['kv_connector_module_path']}.{kv['kv_connector']}, extra {sorted(extra)}, {algo}: ok")
    return argv


def check_sglang(block, sock, python_dir):
    cmds = commands(block)
    env, argv = find(cmds, ["python", "-m", "sglang.launch_server"], "sglang")
    pp_env = next((e for e, a in cmds if "PYTHONPATH" in e), env)
    check_pythonpath(pp_env, python_dir, "sglang")
    if option(argv, "--hicache-storage-backend") != "dynamic" or "--enable-hierarchical-cache" not in argv:
        fail("SGLang needs --enable-hierarchical-cache --hicache-storage-backend dynamic")
    extra = json.loads(option(argv, "--hicache-storage-backend-extra-config"))
    if not extra.get("backend_name"):
        fail("the dynamic backend needs a backend_name")
    source = class_in_module(extra["module_path"], extra["class_name"], "HiCacheStorage")
    unknown = set(extra) - {"backend_name", "module_path", "class_name"} - keys_read(source)
    if unknown:
        fail(f"extra-config keys the backend never reads: {sorted(unknown)}")
    if extra.get("socket_path") != sock:
        fail(f"SGLang's socket_path {extra.get('socket_path')} is not the daemon's {sock}")
    print(f"sglang: {extra['module_path']}.{extra['class_name']}, keys {sorted(extra)}: ok")


def vllm_venv():
    if os.environ.get("KVTIER_VLLM_VENV"):
        return os.environ["KVTIER_VLLM_VENV"]
    home = os.environ.get("HOME", "/nonexistent")
    root = os.environ.get("KVTIER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "kvtier")
    h = hashlib.sha256()
    for name in ("requirements-lock.txt", "setup_venv.sh"):  # as tools/vllm/ci_e2e.sh keys it
        h.update(open(os.path.join(REPO, "tools", "vllm", name), "rb").read())
    venv = os.path.join(root, "venv-vllm-" + h.hexdigest()[:16])
    return venv if os.path.exists(os.path.join(venv, ".kvtier-venv-complete")) else None


def check_vllm_in_venv(block, sock, python_dir):
    venv = vllm_venv()
    if not venv or not os.access(os.path.join(venv, "bin", "python"), os.X_OK):
        print("SKIPPED: no vLLM venv (tools/vllm/ci_e2e.sh installs it; KVTIER_VLLM_VENV names one)")
        sys.exit(SKIP)
    _, argv = find(commands(block), ["vllm", "serve"], "vllm")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(python_dir))
    r = subprocess.run([os.path.join(venv, "bin", "python"), os.path.join(os.path.dirname(__file__), "vllm_args_check.py"),
                        json.dumps(argv[2:])], cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    if r.returncode != 0:
        fail(f"vLLM ({venv}) rejected the README's `vllm serve` arguments:\n{r.stderr[-4000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print("vLLM resolved:", got)
    kv = json.loads(option(argv, "--kv-transfer-config"))
    if got["connector"] != f"{kv['kv_connector_module_path']}.{kv['kv_connector']}":
        fail(f"vLLM loaded {got['connector']}")
    if got["extra_config"].get("socket_path") != sock:
        fail(f"vLLM's socket_path {got['extra_config'].get('socket_path')} is not the daemon's {sock}")
    if got["prefix_caching_hash_algo"] != option(argv, "--prefix-caching-hash-algo"):
        fail(f"vLLM's prefix hash algorithm is {got['prefix_caching_hash_algo']}")
    print("vllm (its own parser, EngineArgs and connector factory): ok")


def main():
    readme_path, cli, python_dir = sys.argv[1:4]
    sys.path.insert(0, python_dir)
    found = blocks(open(readme_path).read())
    missing = {"serve", "vllm", "sglang"} - set(found)
    if missing:
        fail(f"README.md lacks the quickstart blocks {sorted(missing)}")
    if "--vllm-venv" in sys.argv[4:]:
        _, argv = commands(found["serve"])[0]
        check_vllm_in_venv(found["vllm"], os.path.join(option(argv, "--data-dir"), "kvtier.sock"), python_dir)
        return
    sock = check_serve(found["serve"], cli)
    check_vllm(found["vllm"], sock, python_dir)
    check_sglang(found["sglang"], sock, python_dir)
    print("ok")


if __name__ == "__main__":
    main()
