"""load_model / kv_sizing against `kvtier size --json` (the CLI from the same build)."""

import json
import os
import pathlib
import subprocess

import pytest

import kvtier

REPO = pathlib.Path(__file__).resolve().parents[2]
FIELDS = [
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_layer",
    "naive_mha_bytes_per_token_per_layer",
    "state_bytes_per_sequence",
    "kv_bytes_per_block",
    "kv_bytes_per_token_all_gpus",
    "layers_per_gpu",
    "block_size",
]


def cli():
    path = os.environ.get("KVTIER_CLI")
    if not path or not os.path.exists(path):
        pytest.skip("KVTIER_CLI is not set to the kvtier binary (ctest sets it)")
    return path


CASES = [
    ("llama-3-70b", dict(block_size=16, kv_dtype="auto", tp=1), []),
    ("deepseek-v3", dict(block_size=64, kv_dtype="fp8", tp=8), ["--block-size", "64", "--kv-dtype", "fp8", "--tp", "8"]),
    ("gemma-2-9b", dict(block_size=16, kv_dtype="auto", tp=2), ["--tp", "2"]),
]


@pytest.mark.parametrize("name,options,flags", CASES)
def test_matches_cli(name, options, flags):
    out = subprocess.run([cli(), "size", name, "--json", *flags], check=True, capture_output=True, text=True).stdout
    expected = json.loads(out)
    model = kvtier.load_model(name)
    sizing = kvtier.kv_sizing(model, **options)
    for field in FIELDS:
        assert getattr(sizing, field) == expected[field], field
    assert sizing.overprovision_ratio == pytest.approx(expected["overprovision_ratio"])
    assert sizing.kv_dtype["name"] == expected["kv_dtype"]
    assert sizing.tensor_parallel == expected["tensor_parallel"]
    assert model.num_layers == expected["layers"]
    assert model.model_type == expected["model_type"]
    assert model.attention.kind == expected["attention_kind"]
    assert model.parameters["total"] == expected["parameters"]["total"]


def test_config_path_equals_catalog(tmp_path):
    catalog = kvtier.load_model("llama-3-70b")
    source = next((REPO / "data" / "models").glob("Llama-3-70B.json"), None)
    if source is None:
        pytest.skip("catalog file not found")
    copy = tmp_path / "config.json"
    copy.write_text(source.read_text())
    from_path = kvtier.load_model(str(copy))
    assert from_path.source == str(copy)
    a, b = kvtier.kv_sizing(catalog), kvtier.kv_sizing(from_path)
    assert a.kv_bytes_per_token == b.kv_bytes_per_token == 327680
    assert a.kv_bytes_per_block == 16 * a.kv_bytes_per_token


def test_model_attributes_are_read_only():
    model = kvtier.load_model("llama-3-70b")
    assert model.name == "llama-3-70b"
    assert len(model.layers) == model.num_layers == model.count_layers("full_attention")
    with pytest.raises(AttributeError):
        model.num_layers = 3
    sizing = kvtier.kv_sizing(model)
    assert sizing.bytes_per_sequence(1024) >= 1024 * sizing.kv_bytes_per_token
    assert "llama-3-70b" in kvtier.catalog()
