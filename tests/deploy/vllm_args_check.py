"""Run by readme_quickstart_check.py with the vLLM venv's python: the arguments of the README's
`vllm serve` command parsed by vLLM's own parser, turned into vLLM's EngineArgs and configs,
and the KV connector they name resolved by vLLM's own factory, as `vllm serve` does at start.

    python vllm_args_check.py JSON_ARGV     # the arguments after `vllm serve`

Prints one JSON line: the connector class, its extra config and the prefix hash algorithm.
"""

import json
import sys

from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

argv = json.loads(sys.argv[1])
args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(argv)
if getattr(args, "model_tag", None):
    args.model = args.model_tag
engine = EngineArgs.from_cli_args(args)
kv = engine.kv_transfer_config
if kv is None:
    sys.exit("vllm_args_check: no --kv-transfer-config")
cls = KVConnectorFactory.get_connector_class(kv)
if not issubclass(cls, KVConnectorBase_V1):
    sys.exit(f"vllm_args_check: {cls} is not a KVConnectorBase_V1")
print(json.dumps({
    "connector": f"{cls.__module__}.{cls.__qualname__}",
    "kv_role": kv.kv_role,
    "kv_load_failure_policy": kv.kv_load_failure_policy,
    "extra_config": kv.kv_connector_extra_config,
    "prefix_caching_hash_algo": str(engine.prefix_caching_hash_algo),
    "model": engine.model,
}))
