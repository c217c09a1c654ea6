"""Block keys: 16-byte bytes, hi then lo big-endian (BlockKey::FromDigestBytes); chain_keys
and chain_digests equal vLLM's sha256_cbor block hashes (tests/fixtures/vllm_hash_vectors.json)."""

import json

import pytest

import kvtier
from conftest import FIXTURES


def vllm_cases():
    data = json.loads((FIXTURES / "vllm_hash_vectors.json").read_text())
    for seed in data["seeds"]:
        for case in seed["cases"]:
            if case["source"] != "get_request_block_hasher" or case["num_hash_lookahead_tokens"] != 0:
                continue  # hash_block_tokens cases and EAGLE lookahead are the C++ tests'
            if case["request"]["mm_features"]:
                continue  # multimodal extras are not bound yet
            yield pytest.param(seed["none_hash_seed"], case, id=f"{seed['pythonhashseed']}-{case['name']}")


@pytest.mark.parametrize("root_seed,case", list(vllm_cases()))
def test_sha256_cbor_matches_vllm(root_seed, case):
    request = case["request"]
    lora = request["lora"] or {}
    kwargs = dict(
        block_size=case["block_size"],
        algorithm="sha256_cbor",
        root_seed=root_seed,
        cache_salt=request["cache_salt"] or "",
        lora_name=lora.get("lora_name", ""),
        lora_path=lora.get("lora_path", ""),
    )
    digests = kvtier.chain_digests(request["all_token_ids"], **kwargs)
    keys = kvtier.chain_keys(request["all_token_ids"], **kwargs)
    expected = [bytes.fromhex(b["hash"]) for b in case["blocks"]]
    assert digests == expected
    assert keys == [h[:16] for h in expected]
    for key, h in zip(keys, expected):
        assert kvtier.key_hex(key) == h.hex()[:32]
        assert kvtier.key_from_hex(h.hex()[:32]) == key
        assert kvtier.key_hex(h) == h.hex()[:32]  # a full 32-byte vLLM hash is accepted as a key


def test_continue_a_chain_from_its_parent_digest():
    tokens = list(range(64))
    for algorithm in ("xxh3_128", "sha256", "sha256_cbor"):
        whole = kvtier.chain_digests(tokens, 16, algorithm)
        assert len(whole) == 4
        assert len(whole[0]) == (16 if algorithm == "xxh3_128" else 32)
        tail = kvtier.chain_digests(tokens[32:], 16, algorithm, parent=whole[1], first_token=32)
        assert tail == whole[2:]
        assert kvtier.chain_keys(tokens, 16, algorithm) == [d[:16] for d in whole]


def test_partial_block_gets_no_key_and_keys_are_deterministic():
    assert kvtier.chain_keys(list(range(15))) == []
    assert len(kvtier.chain_keys(list(range(40)))) == 2
    assert kvtier.chain_keys(range(32)) == kvtier.chain_keys(list(range(32)))
    assert kvtier.chain_keys(list(range(32)), cache_salt="a") != kvtier.chain_keys(list(range(32)), cache_salt="b")
    key = kvtier.chain_keys(list(range(16)))[0]
    assert isinstance(key, bytes) and len(key) == kvtier.KEY_BYTES


def test_numpy_token_ids():
    np = pytest.importorskip("numpy")
    tokens = np.arange(48, dtype=np.int64)
    assert kvtier.chain_keys(tokens, algorithm="sha256_cbor") == kvtier.chain_keys(list(range(48)), algorithm="sha256_cbor")


def test_wrong_parent_size():
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.chain_keys(list(range(16)), algorithm="sha256", parent=b"x" * 16)
