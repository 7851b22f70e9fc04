"""The application's start-up mechanisms (embedcalc/cli/app.py): typer's coercion deferred until a value needs it,
exact for every parameter of every command; pydantic's plugin loader stood in for while plugins are off."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.core
import typer.main
from typer._click import Context
from typer._coercion import build_runtime_param

from embedcalc.cli.app import build_app
from embedcalc.cli.startup import _NOT_PLAIN, _DeferredCoercion, _plain_coercion


def _parameters(command: Any, path: str = "embedcalc") -> Iterator[tuple[str, Any, Any]]:
    """(command path, command, parameter) for every parameter of the whole application, --help's included."""
    ctx = Context(command)
    for param in [*command.params, command.get_help_option(ctx)]:
        if param is not None:
            yield path, command, param
    for name, sub in getattr(command, "commands", {}).items():
        yield from _parameters(sub, f"{path} {name}")


PARAMETERS = list(_parameters(typer.main.get_command(build_app())))


def test_the_walk_sees_every_command() -> None:
    paths = {path for path, _, _ in PARAMETERS}
    assert {
        "embedcalc analyze",
        "embedcalc presets show",
        "embedcalc hardware show",
        "embedcalc plan",
    } <= paths
    assert len(PARAMETERS) > 200


@pytest.mark.parametrize(
    ("path", "command", "param"), PARAMETERS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_coercion_is_deferred_and_every_default_passes_typers_coercion_unchanged(
    path: str, command: Any, param: Any
) -> None:
    """_DeferredCoercion returns a default as it is: typer's own adapter must return it unchanged too. (The
    sub-applications' --help keeps typer's own eager coercion, None here.)"""
    assert isinstance(param._runtime_param, _DeferredCoercion) or param.name == "help", (path, param.name)
    default = param.default
    if default is None or callable(default):
        return  # None: typer's RuntimeParam.coerce itself; a factory's value is never the default object
    real = build_runtime_param(param.type_descriptor)
    coerced = real.coerce(default, param=param, ctx=Context(command))
    assert coerced == default and type(coerced) is type(default), (path, param.name, default, coerced)


def test_every_parameter_of_analyze_is_deferred() -> None:
    analyze = [param for path, _, param in PARAMETERS if path in ("embedcalc", "embedcalc analyze")]
    assert len(analyze) > 30
    assert all(isinstance(param._runtime_param, _DeferredCoercion) for param in analyze)


def test_a_given_value_is_still_coerced_by_typer(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--batch-size", "abc")
    assert result.exit_code == 2
    assert "Input should be a valid integer" in result.stderr
    ok = cli("analyze", "bert-base", "--batch-size", "3", "--mode", "training", "--format", "json")
    assert ok.exit_code == 0, ok.stderr
    assert '"batch_size": 3' in ok.stdout and '"mode": "training"' in ok.stdout


def test_a_default_left_alone_is_the_default(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert '"batch_size": 1' in result.stdout and '"mode": "inference"' in result.stdout


def _plain_cases() -> Iterator[tuple[str, Any, Any, Any]]:
    """(command path, command, parameter, value) for every str or choice parameter: a text and, for a choice,
    each choice as typed (its value, upper-cased too) and one that is none of them."""
    for path, command, param in PARAMETERS:
        descriptor = param.type_descriptor
        if descriptor.annotation is str:
            yield path, command, param, "bert-base"
            continue
        choices = typer._param_types.choice_coercion_annotation(
            descriptor.annotation, descriptor.parameter_info
        )
        if choices is None:
            continue
        for choice in choices[0]:
            text = typer._param_types.choice_as_str(choice)
            yield path, command, param, text
            yield path, command, param, text.upper()
        yield path, command, param, "not-a-choice"


PLAIN_CASES = list(_plain_cases())


def test_the_plain_cases_cover_analyze() -> None:
    """TARGET and --format of analyze, the values `analyze PRESET --format json` gives, are among them."""
    names = {param.name for path, _, param, _ in PLAIN_CASES if path == "embedcalc analyze"}
    assert {"target", "format"} <= names, names
    assert len(PLAIN_CASES) > 100


@pytest.mark.parametrize(
    ("path", "command", "param", "value"), PLAIN_CASES, ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_plain_value_is_coerced_as_typers_adapter_coerces_it(
    path: str, command: Any, param: Any, value: Any
) -> None:
    """_plain_coercion gives what typer's own adapter gives (same value, same type), or steps aside
    (_NOT_PLAIN) where the adapter refuses the value, so the adapter's message is the one the user reads."""
    ctx = Context(command)
    plain = _plain_coercion(param.type_descriptor, value, ctx)
    real = build_runtime_param(param.type_descriptor)
    try:
        expected = real._coerce_value(value, param=param, ctx=ctx)
    except typer.BadParameter:
        assert plain is _NOT_PLAIN, (path, param.name, value, plain)
        return
    if plain is _NOT_PLAIN:  # allowed (the adapter then coerces), but not for a str or a valid choice
        pytest.fail(f"{path} {param.name}: {value!r} is the adapter's {expected!r}, but not plain")
    assert plain == expected and type(plain) is type(expected), (path, param.name, value, plain, expected)


def test_the_first_coercion_replaces_the_deferred_one() -> None:
    command = typer.main.get_command(build_app("analyze"))
    analyze = command.commands["analyze"]  # type: ignore[attr-defined]
    batch = next(p for p in analyze.params if p.name == "batch_size")
    assert isinstance(batch._runtime_param, _DeferredCoercion)
    assert batch._runtime_param.coerce("7", param=batch, ctx=Context(analyze)) == 7
    assert isinstance(batch._runtime_param, typer._coercion.AdapterRuntimeParam)


# --- pydantic's plugin loader, stood in for while PYDANTIC_DISABLE_PLUGINS says there are none ---------------

STAND_IN = """
import json, os, sys
os.environ.update(json.loads(sys.argv[1]))
from embedcalc.cli.startup import skip_plugin_discovery
skip_plugin_discovery()
from pydantic import BaseModel
class M(BaseModel):
    value: int = 0
stand_in = type(sys.modules["pydantic.plugin._loader"]).__name__ == "module" and not hasattr(
    sys.modules["pydantic.plugin._loader"], "__file__")
from pydantic.plugin._loader import get_plugins
plugins = list(get_plugins())
metadata = "importlib.metadata" in sys.modules
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "some_other_plugin"
after = [type(p).__name__ for p in get_plugins()]
print(json.dumps({"validated": M(value=3).value, "stand_in": stand_in, "plugins": plugins,
                  "metadata": metadata, "after": after,
                  "real": hasattr(sys.modules["pydantic.plugin._loader"], "__file__")}))
"""


def _stand_in(env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", STAND_IN, json.dumps(env)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("value", ["__all__", "1", "true"])
def test_no_plugin_discovery_while_plugins_are_off(value: str) -> None:
    """pydantic's get_plugins returns () for these values; so does the stand-in, without importlib.metadata."""
    got = _stand_in({"PYDANTIC_DISABLE_PLUGINS": value})
    assert got["validated"] == 3 and got["stand_in"] and got["plugins"] == [] and not got["metadata"]
    assert got["real"]  # the variable changed: the real loader was imported and asked
    assert got["after"] == []  # (no pydantic plugin is installed here)


def test_plugins_on_keeps_pydantics_loader() -> None:
    got = _stand_in({"PYDANTIC_DISABLE_PLUGINS": "some_plugin"})
    assert not got["stand_in"] and got["real"] and got["validated"] == 3


def test_pydantic_asks_its_plugin_loader_for_get_plugins_only() -> None:
    """The stand-in pays only if pydantic imports nothing else from the loader (anything else would import the
    real one: still correct, no longer faster)."""
    import pydantic

    names: set[str] = set()
    for path in Path(pydantic.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_loader"):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                assert not any(a.name.endswith("plugin._loader") for a in node.names), path
    assert names == {"get_plugins"}


GC_DURING = """
import gc, json, sys
runs = []
sys.argv = ["embedcalc", *sys.argv[1:]]
from embedcalc.cli.app import main
from embedcalc.cli.startup import GC_THRESHOLD
# the collections once main() has set its threshold (the imports before it run at the default)
gc.callbacks.append(lambda phase, info: runs.append(info["generation"])
                    if phase == "stop" and gc.get_threshold()[0] == GC_THRESHOLD else None)
try:
    main()
except SystemExit:
    pass
print(json.dumps({"collections": runs, "threshold": gc.get_threshold()[0]}), file=sys.stderr)
"""


def test_the_collector_does_not_run_during_the_start_up_of_analyze_preset() -> None:
    """main() raises the collector's first threshold (cli/app.py GC_THRESHOLD): `analyze PRESET --format json`
    makes fewer net allocations than that, so it never collects (at the default 700 it collected 27 times)."""
    from embedcalc.cli.startup import GC_THRESHOLD

    proc = subprocess.run([sys.executable, "-c", GC_DURING, "analyze", "bert-large", "--format", "json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stderr.strip().splitlines()[-1])
    assert got == {"collections": [], "threshold": GC_THRESHOLD}
