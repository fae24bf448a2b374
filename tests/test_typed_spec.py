"""No run-config mapping below the boundary; the typed spec each party builds there, once.

``scenarios/`` (the Flower app) resolves a run config and builds one frozen
:class:`fedpriv.spec.RunSpec` per party, at its boundary: the server when it resolves its
config (:func:`fedpriv.scenarios.config.specs.server_run`), each ClientApp node when it reads its
Context and a message (:func:`fedpriv.scenarios.config.specs.node_call`). ``fedpriv/``,
``strategies/`` and ``clients/`` take typed values. An AST scan checks that no function there
takes a config mapping (a parameter named like a config, annotated ``Mapping``/``dict``) and
that no code there reads a declared run-config key out of one (``cfg["seed"]``,
``config.get("num-clients")``). The one exception is the mode registry, the single reader of
the ``privacy`` key of a config or a record.

Past the boundary inside ``scenarios/`` (the round engine, the ServerApp and ClientApp
handlers, the grid adapters, the recorder, resume, the zone node) a second scan finds no
declared key read out of any mapping and no spec built; in the feature runners, wrappers and
summary blocks, no spec built and no value the spec holds read out of the run's record. A
count of spec builds in one small in-process run checks the "once" itself.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.node_spec import node_keys, resolve_node
from fedpriv.scenarios.config.specs import build, run_spec

from fedpriv.privacy.modes import ModeError
from fedpriv.privacy.modes.base import Mode
from fedpriv.spec import KEY, DataSpec, RunSpec, StrategySpec, TrainSpec, ZoneSpec, key

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


def _read_key(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(target, key) of a ``target[key]`` or a ``target.get(key, ...)`` with a str key."""
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
    if isinstance(index, ast.Constant) and isinstance(index.value, str):
        return target, index.value
    return None


def _key_read(node: ast.AST) -> str | None:
    """The declared key a ``name[key]`` / ``name.get(key)`` on a config-named ``name`` reads."""
    read = _read_key(node)
    if read is None:
        return None
    target, index = read
    named = (isinstance(target, ast.Name) and target.id in CONFIG_NAMES) or (
        isinstance(target, ast.Attribute) and target.attr in CONFIG_NAMES
    )  # cfg["seed"], context.run_config["seed"]
    return index if named and index in DECLARED else None


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


# --- past the boundary inside scenarios/ ---------------------------------------------------------

# the engine, the ServerApp and ClientApp handlers, the grid adapters, the recorder, resume and
# the zone node: they take the spec (and the run's record where a mapping is the record itself)
PAST_BOUNDARY = (
    "scenarios/app/client_app.py",
    "scenarios/app/client_tasks.py",
    "scenarios/app/engine.py",
    "scenarios/nodes/federation.py",
    "scenarios/app/fused.py",
    "scenarios/app/recorder.py",
    "scenarios/app/resume.py",
    "scenarios/app/round_loop.py",
    "scenarios/app/server_app.py",
    "scenarios/zonal/zone_node.py",
)
# the runners, wrappers and summary blocks of the features (and the multi-run dispatcher)
RUNNERS = (
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").glob("*/feature.py")),
    "scenarios/app/multirun.py",
    "scenarios/app/tracking.py",  # the tracking feature's own keys (the record)
    "scenarios/ifca/outputs.py",
)
# (module, function) where a party builds its spec: the boundary itself
BOUNDARY = frozenset(
    {
        ("scenarios/app/server_app.py", "main"),  # the server, once it resolved its config
        ("scenarios/app/multirun.py", "run_one"),  # each cell of a plan, resolved from the plan
        ("scenarios/app/client_app.py", "resolved"),  # a node: its Context and the message
        ("scenarios/app/fused.py", "check_evaluate_in_train"),  # a check of the config resolved
        ("scenarios/dp/feature.py", "_epsilon"),  # `fedpriv epsilon`: a command's own config
        ("scenarios/adaptive_clip/feature.py", "check_adaptive"),  # checks of the config
        ("scenarios/client_budgets/feature.py", "check_client_budgets"),  # resolved, own mode only
    }
)
BUILDERS = frozenset(
    {"run_spec", "train_spec", "data_spec", "build", "complete", "server_run", "node_call"}
    | {cls.__name__ for cls in SPEC_CLASSES}
)
SPEC_KEYS = frozenset(f.metadata[KEY] for cls in SPEC_CLASSES for f in _keyed(cls))
HOLDERS = ("ServerRun", "NodeCall", "RunSpec")  # a parameter of these types: the spec is there


def _functions(tree: ast.AST):
    """Every (function, names of the functions enclosing it and itself)."""
    todo = [(tree, ())]
    while todo:
        node, outer = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield child, (*outer, child.name)
                todo.append((child, (*outer, child.name)))
            else:
                todo.append((child, outer))


def _own_nodes(fn: ast.AST):
    """The nodes of ``fn``'s body, not those of the functions defined in it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            todo.extend(ast.iter_child_nodes(node))


def _in_boundary(module: str, names: tuple[str, ...]) -> bool:
    return any((module, name) in BOUNDARY for name in names)


def spec_builds(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """(line, what) of every spec built outside the boundary functions of ``module``."""
    out = []
    scopes = [(tree, "<module>"), *((fn, fn.name) for fn, names in _functions(tree)
                                     if not _in_boundary(module, names))]  # fmt: skip
    for scope, where in scopes:
        for node in _own_nodes(scope):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in BUILDERS:
                    out.append((node.lineno, f"{where} builds a spec: {name}(...)"))
    return sorted(set(out))


def declared_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every declared run-config key read out of any mapping."""
    out = []
    for node in ast.walk(tree):
        read = _read_key(node)
        if read is not None and read[1] in DECLARED:
            out.append((node.lineno, f"reads {read[1]!r} from {ast.unparse(read[0])}"))
    return out


def _holds_spec(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return any(a.annotation is not None and ast.unparse(a.annotation) in HOLDERS for a in args)


def _record_names(fn: ast.AST) -> set[str]:
    """Local names bound to a run's record (``cfg = run.record``, ``cfg, spec = run.record``)."""
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            pairs = []
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += list(zip(target.elts, node.value.elts))
                else:
                    pairs.append((target, node.value))
            for name, value in pairs:
                if isinstance(name, ast.Name) and _is_record(value, set()):
                    names.add(name.id)
    return names


def _is_record(node: ast.AST, names: set[str]) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "record") or (
        isinstance(node, ast.Name) and node.id in names
    )


def spec_values_from_record(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of a value the spec holds read out of the run's record by a function that
    has the spec (``run.record["seed"]`` where ``run.spec.seed`` is at hand)."""
    out = []
    for fn, _ in _functions(tree):
        if not _holds_spec(fn):
            continue
        names = _record_names(fn)
        for node in ast.walk(fn):
            read = _read_key(node)
            if read is not None and read[1] in SPEC_KEYS and _is_record(read[0], names):
                out.append((node.lineno, f"{fn.name} reads {read[1]!r} from the record"))
    return sorted(set(out))


def _scan(module: str) -> ast.AST:
    return ast.parse((ROOT / module).read_text(), filename=module)


def _say(module: str, found: list[tuple[int, str]]) -> str:
    return f"{module}: " + "; ".join(f"line {n}: {w}" for n, w in found)


def test_the_boundary_scans_catch_a_rebuild_a_read_and_a_record_read():
    """Each scan flags its forbidden form and passes the typed one (they can fail)."""
    bad = (
        "def train_run(grid, run: ServerRun, data):\n"
        "    spec = run_spec(run.record)\n"  # 2: a rebuild below the boundary
        "    cfg = run.record\n"
        "    return cfg['seed'], run.record.get('num-server-rounds'), cfg['zonal-level']\n"
        "def evaluate(call: NodeCall):\n"
        "    return TrainSpec(**call.record)\n"  # 6: a spec part built from the record
        "SPEC = data_spec({})\n"  # 7: at import
    )
    tree = ast.parse(bad)
    module = "scenarios/app/engine.py"
    assert [n for n, _ in spec_builds(tree, module)] == [2, 6, 7]
    assert sorted({n for n, _ in declared_reads(tree)}) == [4]
    assert [w.split(" reads ")[1] for _, w in spec_values_from_record(tree)] == [
        "'num-server-rounds' from the record",
        "'seed' from the record",
    ]  # 'zonal-level' is the message's own value, not the spec's
    good = (
        "def main(grid, context):\n    run = server_run(resolve(context.run_config))\n"
        "def train_run(grid, run: ServerRun, data):\n"
        "    spec = run.spec\n    return spec.seed, wire_config(run.record), s['round']\n"
    )
    tree = ast.parse(good)
    assert spec_builds(tree, "scenarios/app/server_app.py") == []
    assert declared_reads(tree) == [] and spec_values_from_record(tree) == []
    assert spec_builds(tree, module) == [(2, "main builds a spec: server_run(...)")]


def _past(tree: ast.AST, module: str, found: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``found`` without the lines of the module's boundary functions (a config check)."""
    spans = [
        range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)
        for fn, names in _functions(tree)
        if _in_boundary(module, names)
    ]
    return [(n, w) for n, w in found if not any(n in span for span in spans)]


@pytest.mark.parametrize("module", PAST_BOUNDARY)
def test_past_the_boundary_code_takes_the_spec(module):
    """No config-mapping parameter, no declared key read out of any mapping, no spec built."""
    tree = _scan(module)
    found = _past(tree, module, violations(tree) + declared_reads(tree))
    found += spec_builds(tree, module)
    assert not found, _say(module, found)


@pytest.mark.parametrize("module", RUNNERS)
def test_runners_build_no_spec_and_read_the_spec_s_values_from_it(module):
    """A runner, wrapper or summary block takes its party's run: it builds no spec and reads
    no value the spec holds out of the run's record (a feature's own keys stay there)."""
    tree = _scan(module)
    found = spec_builds(tree, module) + spec_values_from_record(tree)
    assert not found, _say(module, found)


def test_the_boundary_modules_exist():
    """Every module and boundary function the scans name is there (a move fails loudly)."""
    for module in {*PAST_BOUNDARY, *RUNNERS, *(m for m, _ in BOUNDARY)}:
        assert (ROOT / module).is_file(), module
    for module, name in BOUNDARY:
        assert name in {fn.name for fn, _ in _functions(_scan(module))}, (module, name)
