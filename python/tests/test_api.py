"""The package's surface without a daemon: one version, a docstring on every public
class, function and method, frozen result types, and the acquire forms' arguments."""

import ast
import dataclasses
import os
import re

import pytest

import lockd

PKG = os.path.dirname(os.path.abspath(lockd.__file__))
PYPROJECT = os.path.join(os.path.dirname(PKG), "pyproject.toml")


def test_one_version_read_from_the_package() -> None:
    import tomllib  # the tests run on the system Python 3.11
    with open(PYPROJECT, "rb") as f:
        conf = tomllib.load(f)
    assert conf["project"]["dynamic"] == ["version"] and "version" not in conf["project"]
    assert conf["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lockd.__version__"}
    assert conf["project"]["urls"]["Homepage"].startswith("https://")
    assert conf["tool"]["setuptools"]["package-data"]["lockd"] == ["py.typed"]
    assert os.path.exists(os.path.join(PKG, "py.typed"))
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", lockd.__version__)


def test_every_public_definition_has_a_docstring() -> None:
    missing: list[str] = []
    for name in sorted(os.listdir(PKG)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(PKG, name)) as f:
            tree = ast.parse(f.read())
        assert ast.get_docstring(tree), f"{name}: no module docstring"

        def visit(body: list[ast.stmt], where: str) -> None:
            for node in body:
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if node.name.startswith("_"):
                    continue
                overload = any(isinstance(d, ast.Name) and d.id == "overload"
                               for d in node.decorator_list)
                if not overload and not ast.get_docstring(node):
                    missing.append(f"{name}: {where}{node.name}")
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{node.name}.")
        visit(tree.body, "")
    assert not missing, "no docstring: " + ", ".join(missing)
    for name in lockd.__all__:
        obj = getattr(lockd, name)
        if callable(obj) or isinstance(obj, type(lockd)):
            assert obj.__doc__, f"lockd.{name} has no docstring"


def test_results_are_frozen_dataclasses() -> None:
    for cls in (lockd.LeaderInfo, lockd.LockInfo, lockd.Holder, lockd.Waiter,
                lockd.LossNotice):
        # getattr: typeshed does not declare dataclasses' private __dataclass_params__.
        assert dataclasses.is_dataclass(cls) and getattr(cls, "__dataclass_params__").frozen, cls
    info = lockd.LeaderInfo(host_id=1, generation=2, token=3, state="live", shared=False,
                            host_name="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(info, "token", 4)
    assert info == lockd.LeaderInfo(1, 2, 3, "live", False, "a") and hash(info)
    row = lockd.LockInfo("ls", "r", "ls:r:/d:0", 1, "a", 3, "live", False,
                         (lockd.Holder(42, "w", 3, "EX"),), ())
    assert dataclasses.asdict(row)["holders"] == ({"pid": 42, "name": "w", "token": 3,
                                                    "mode": "EX"},)


def test_acquire_arguments_are_checked_before_any_io() -> None:
    lease = lockd.Lease("ls:r:/dev/x:0", run_dir="/nonexistent")
    with pytest.raises(lockd.BadSpec):
        lease.acquire(True, -1)
    with pytest.raises(lockd.BadSpec):
        lease.acquire(timeout="soon")  # type: ignore[call-overload]  # ill-typed on purpose
    # Both forms reach the daemon (none here): DaemonGone, not a bool.
    with pytest.raises(lockd.DaemonGone):
        lease.acquire(blocking=False)
    with pytest.raises(lockd.DaemonGone):
        lease.acquire()
    lease.cancel()  # nothing under way: no effect
    assert lease.token is None and not lease.is_trusted
    assert issubclass(lockd.Cancelled, lockd.LockdError)
