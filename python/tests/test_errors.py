"""Every Status from C++ raises kvtier.KvtierError (its subclass for the code) with the code,
its name and the message."""

import pytest

import kvtier

CODES = {
    1: ("InvalidArgument", kvtier.InvalidArgumentError),
    2: ("NotFound", kvtier.NotFoundError),
    3: ("IoError", kvtier.IoError),
    4: ("Corruption", kvtier.CorruptionError),
    5: ("Unsupported", kvtier.UnsupportedError),
    6: ("ResourceExhausted", kvtier.ResourceExhaustedError),
    7: ("Unavailable", kvtier.UnavailableError),
    8: ("Internal", kvtier.InternalError),
    9: ("FailedPrecondition", kvtier.FailedPreconditionError),
    10: ("AlreadyExists", kvtier.AlreadyExistsError),
    11: ("PermissionDenied", kvtier.PermissionDeniedError),
}


def test_one_class_per_code():
    for code, (name, cls) in CODES.items():
        assert issubclass(cls, kvtier.KvtierError)
        assert issubclass(cls, Exception)
        assert cls.code == code
        assert cls.code_name == name
        assert kvtier.status_code_name(code) == name
        assert cls.__module__ == "kvtier"
    assert issubclass(kvtier.InvalidArgumentError, ValueError)
    assert issubclass(kvtier.NotFoundError, LookupError)


def test_not_found_carries_code_and_message():
    with pytest.raises(kvtier.NotFoundError) as info:
        kvtier.load_model("no-such-model")
    e = info.value
    assert isinstance(e, kvtier.KvtierError)
    assert e.code == 2 and e.code_name == "NotFound"
    assert "no-such-model" in e.message and str(e) == e.message
    assert "llama" in e.message  # NotFound lists the catalog


def test_invalid_argument():
    model = kvtier.load_model("llama-3-70b")
    with pytest.raises(kvtier.KvtierError) as info:
        kvtier.kv_sizing(model, kv_dtype="fp7")
    assert info.value.code == 1 and info.value.code_name == "InvalidArgument"
    assert isinstance(info.value, ValueError)
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.chain_keys([1, 2, 3], block_size=0)
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.chain_keys([-1] * 16)
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.chain_keys([0] * 16, algorithm="md5")


def test_missing_config_file(tmp_path):
    with pytest.raises(kvtier.KvtierError) as info:
        kvtier.Store(str(tmp_path / "absent.yaml"))
    assert info.value.code in (2, 3)  # NotFound or IoError, naming the file
    assert "absent.yaml" in str(info.value)


def test_bad_tier_config_names_the_field(tmp_path):
    with pytest.raises(kvtier.InvalidArgumentError) as info:
        kvtier.Store(tier_config_text="tiers:\n  - kind: floppy\n    capacity: 1MiB\n")
    assert "floppy" in str(info.value)


def test_unreachable_server(tmp_path):
    with pytest.raises(kvtier.KvtierError) as info:
        kvtier.Client.connect_unix(str(tmp_path / "nobody.sock"))
    assert info.value.code_name in ("Unavailable", "IoError", "NotFound")
