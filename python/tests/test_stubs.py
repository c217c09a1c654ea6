"""The type stubs (_kvtier.pyi) declare every public name of the extension, and every public
attribute of its classes."""

import ast
import pathlib

import kvtier
from kvtier import _kvtier

STUB = pathlib.Path(kvtier.__file__).with_name("_kvtier.pyi")
INHERITED = set(dir(object)) | set(dir(Exception)) | {"__members__", "__entries", "__init__"}


def stub_tree():
    tree = ast.parse(STUB.read_text())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {
                n.name if isinstance(n, ast.FunctionDef) else n.target.id
                for n in node.body
                if isinstance(n, ast.FunctionDef) or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
            }
    return names, members


def test_every_public_name_has_a_stub():
    names, members = stub_tree()
    public = {n for n in dir(_kvtier) if not n.startswith("_")}
    assert public - names == set()
    for name, declared in members.items():
        cls = getattr(_kvtier, name)
        if issubclass(cls, Exception):
            continue
        attrs = {a for a in vars(cls) if not a.startswith("_") or a in ("__enter__", "__exit__", "__len__")}
        attrs -= INHERITED - {"__enter__", "__exit__", "__len__"}
        attrs -= {"name", "value"} & attrs  # pybind11 enum internals, declared as properties anyway
        missing = {a for a in attrs if a not in declared and not (a.isupper() and a in declared)}
        assert missing == set(), f"{name}: {missing}"


def test_package_reexports():
    for name in kvtier.__all__:
        assert hasattr(kvtier, name)
