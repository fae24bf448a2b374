"""No run-config mapping below ``scenarios/``; the typed spec it hands down.

``scenarios/`` (the Flower app) resolves a run config and builds one frozen
:class:`fedpriv.spec.RunSpec` per party (:func:`scenarios.config.specs.run_spec`); ``fedpriv/``,
``strategies/`` and ``clients/`` take typed values. An AST scan checks that no function there
takes a config mapping (a parameter named like a config, annotated ``Mapping``/``dict``) and
that no code there reads a declared run-config key out of one (``cfg["seed"]``,
``config.get("num-clients")``). The one exception is the mode registry, the single reader of
the ``privacy`` key of a config or a record.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from fedpriv.privacy.modes import ModeError
from fedpriv.privacy.modes.base import Mode
from fedpriv.spec import KEY, DataSpec, RunSpec, StrategySpec, TrainSpec, ZoneSpec, key
from scenarios.config.features import CATALOG
from scenarios.config.node_spec import node_keys, resolve_node
from scenarios.config.specs import build, run_spec

ROOT = Path(__file__).resolve().parents[1]
BELOW = ("fedpriv", "strategies", "clients")
ALLOWED = ("fedpriv/privacy/modes/registry.py",)  # name_of / mode_of / selected: THE privacy reader
CONFIG_NAMES = frozenset({"cfg", "config", "run_config", "node_config", "own", "overrides"})
SPEC_CLASSES = (DataSpec, TrainSpec, StrategySpec, ZoneSpec, RunSpec)
DECLARED = frozenset(node_keys())


def _sources() -> list[Path]:
    files = [p for pkg in BELOW for p in sorted((ROOT / pkg).rglob("*.py"))]
    return [p for p in files if str(p.relative_to(ROOT)) not in ALLOWED]


def _mapping_annotation(node: ast.expr | None) -> bool:
    text = ast.unparse(node) if node is not None else ""
    return any(word in text for word in ("Mapping", "dict", "Dict"))


def _key_read(node: ast.AST) -> str | None:
    """The declared key a ``name[key]`` / ``name.get(key)`` on a config-named ``name`` reads."""
    if isinstance(node, ast.Subscript):
        target, index = node.value, node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
    ):
        target, index = node.func.value, node.args[0]
    else:
        return None
    named = (isinstance(target, ast.Name) and target.id in CONFIG_NAMES) or (
        isinstance(target, ast.Attribute) and target.attr in CONFIG_NAMES
    )  # cfg["seed"], context.run_config["seed"]
    keyed = isinstance(index, ast.Constant) and index.value in DECLARED
    return str(index.value) if named and keyed else None


def violations(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every config-mapping parameter and run-config key read."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.arg in CONFIG_NAMES and _mapping_annotation(arg.annotation):
                    out.append(
                        (node.lineno, f"{node.name}({arg.arg}: {ast.unparse(arg.annotation)})")
                    )
        read = _key_read(node)
        if read is not None:
            out.append((node.lineno, f"reads {read!r} from a config mapping"))
    return out


def test_the_scan_catches_a_config_parameter_and_a_key_read():
    """The scan flags each forbidden form and passes typed code (it can fail)."""
    bad = (
        "def f(cfg: Mapping[str, Any]) -> int:\n    return cfg['seed']\n"
        "def g(*, config: dict[str, Any]):\n    return config.get('num-clients', 1)\n"
        "def h(context):\n    return context.run_config['output-dir']\n"
    )
    assert sorted(line for line, _ in violations(ast.parse(bad))) == [1, 2, 3, 4, 6]
    good = (
        "def f(spec: RunSpec) -> int:\n    return spec.seed\n"
        "def g(metrics: Mapping[str, Any]):\n    return metrics['accuracy']\n"
        "def h(record: dict) -> str:\n    return record['privacy-mode']\n"
    )
    assert violations(ast.parse(good)) == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_run_config_mapping_below_scenarios(path):
    found = violations(ast.parse(path.read_text(), filename=str(path)))
    assert not found, f"{path.relative_to(ROOT)}: " + "; ".join(f"line {n}: {w}" for n, w in found)


# --- the spec ----------------------------------------------------------------------------


def _keyed(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if KEY in f.metadata]


@pytest.mark.parametrize("cls", SPEC_CLASSES, ids=lambda c: c.__name__)
def test_every_spec_field_names_one_declared_key(cls):
    """A field's key is a declared run-config key, and no two fields of a class share one."""
    keys = [f.metadata[KEY] for f in _keyed(cls)]
    assert set(keys) <= DECLARED, sorted(set(keys) - DECLARED)
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("cls", SPEC_CLASSES, ids=lambda c: c.__name__)
def test_build_reads_each_field_from_its_own_key(cls):
    """Every declared key gets a distinct sentinel; each field comes back with its key's."""
    sentinels = {name: f"<{name}>" for name in DECLARED}
    if cls is RunSpec:
        spec = run_spec({**sentinels, "privacy": "none", "num-clients": 3, "clients-per-round": 0,
                         "num-sampled-clients": 0, "client-sampling": "fixed",
                         "scenario": "digits"})  # fmt: skip
        fixed = {"num-clients", "privacy", "scenario", "clients-per-round"}
    else:
        spec, fixed = build(cls, sentinels), set()
    for f in _keyed(cls):
        if f.metadata[KEY] not in fixed:
            assert getattr(spec, f.name) == f"<{f.metadata[KEY]}>", f.name


@pytest.mark.parametrize("scenario", sorted(CATALOG.scenarios))
def test_run_spec_of_every_scenario_holds_its_resolved_values(scenario):
    """The spec of each scenario's node resolution: its mode object, the scenario kind, and
    the values under independently spelled keys."""
    cfg = resolve_node({"scenario": scenario})
    spec = run_spec(cfg)
    assert spec.kind == CATALOG.kind(cfg)
    assert spec.scenario == scenario and spec.seed == cfg["seed"]
    assert spec.rounds == cfg["num-server-rounds"]
    assert spec.data.num_clients == cfg["num-clients"] == spec.participation.population
    assert (spec.train.learning_rate, spec.train.batch_size) == (
        cfg["learning-rate"], cfg["batch-size"],
    )  # fmt: skip
    assert spec.strategy.strategy == cfg["strategy"] == spec.train.strategy
    assert isinstance(spec.params, spec.mode.params)
    assert dataclasses.replace(spec, seed=7).seed == 7 and spec.seed == cfg["seed"]


def test_a_spec_is_frozen_and_a_data_spec_is_a_cache_key():
    spec = run_spec(resolve_node({"scenario": "digits"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 3  # type: ignore[misc]
    same = run_spec(resolve_node({"scenario": "digits"}))
    assert {spec.data: 1}[same.data] == 1
    assert hash(dataclasses.replace(spec.data, seed=1)) != hash(spec.data) or spec.data.seed == 1


def test_a_missing_key_names_it():
    with pytest.raises(KeyError, match="dirichlet-alpha"):
        build(DataSpec, {"dataset": "digits", "partition": "iid", "num-clients": 2, "seed": 0,
                         "data-path": "", "data-format": "auto", "image-size": 8})  # fmt: skip


def test_a_mode_whose_params_name_no_key_fails_closed():
    """A params field without a config key is refused when the mode is checked (register)."""

    @dataclasses.dataclass(frozen=True)
    class Unkeyed:
        noise_multiplier: float = key("noise-multiplier")
        clipping_norm: float = 1.0

    mode = Mode(
        name="unkeyed-test",
        params=Unkeyed,
        threat_model={"server": "trusted"},
        epsilon_against={"server": "none"},
        plan=lambda spec, examples=None: {},
        disclosure=None,
        filters=False,
    )
    with pytest.raises(ModeError, match="clipping_norm"):
        mode.check()
