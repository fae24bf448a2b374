"""What a run will do, before it runs: ``fedpriv show``, ``keys --scenario``, ``epsilon``'s
headline, and config errors that name the bad pair, the missing quotes and the nearest key."""

from __future__ import annotations

import io
import json
import tomllib
from contextlib import redirect_stderr, redirect_stdout

import pytest
from fedpriv.scenarios.cli.launch import app_config, parse_overrides
from fedpriv.scenarios.cli.main import main
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import run_spec

from fedpriv.privacy.accounting.planning import privacy_plan
from fedpriv.reporting.console import num


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def _section(text: str, title: str) -> list[str]:
    """The indented lines under the heading that starts with ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 1
    out = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        out.append(line[2:])
    return out


def _expected(overrides: dict) -> dict:
    return CATALOG.resolve_run_config(app_config(overrides))


# the scenarios of a user's own data need its path (show reads no data: any path will do)
NEEDS_DATA = {"alzheimer", "cia-alzheimer"}


@pytest.mark.parametrize("name", sorted(CATALOG.scenarios))
def test_show_prints_the_resolved_config_the_changes_and_the_plan(name, tmp_path):
    extra = {"data-path": str(tmp_path / "mri")} if name in NEEDS_DATA else {}
    items = ["-c", f"data-path='{extra['data-path']}'"] if extra else []
    status, out, err = _cli("show", name, *items)
    assert status == 0, err
    want = _expected({"scenario": name, **extra})
    config = tomllib.loads("\n".join(_section(out, "resolved config")))
    assert config == want  # every key, its resolved value (TOML round trip)
    changed = {line.split()[0] for line in _section(out, "changed from the key defaults")}
    assert changed == {k for k, spec in CATALOG.keys.items() if want[k] != spec.default}
    headline = _section(out, "privacy plan")
    plan = privacy_plan(run_spec({**want, "scenario-kind": CATALOG.scenarios[name].kind}))
    assert headline[0].split() == ["mode", plan["mode"]]
    # what it prints is a config file -c accepts, and it resolves to the same run
    path = tmp_path / "run.toml"
    path.write_text("\n".join(_section(out, "resolved config")))
    assert _expected(parse_overrides([str(path)])) == want


def test_show_names_who_set_each_changed_key():
    status, out, _ = _cli("show", "digits", "-c", "seed=3 privacy='global-dp'")
    assert status == 0
    rows = {line.split()[0]: line for line in _section(out, "changed from the key defaults")}
    assert (
        "set on the command line" in rows["seed"] and "set on the command line" in rows["privacy"]
    )
    assert "set by the scenario" in rows["num-server-rounds"]
    assert "privacy mode's value" in rows["noise-multiplier"]  # global DP's z for "auto"
    assert "epsilon" in "\n".join(_section(out, "privacy plan"))


def test_show_states_the_sampling_that_happens():
    """hdp-digits samples 20 of its 100 clients a round; its headline ε is not amplified by
    that (it holds against the sampler), and the plan says both."""
    status, out, _ = _cli("show", "hdp-digits")
    assert status == 0
    rows = {line.split()[0]: line for line in _section(out, "privacy plan")}
    assert "20 of 100 per round" in rows["sampling"] and "every client" not in rows["sampling"]
    assert "not amplified" in rows["sampling"]
    status, out, _ = _cli("epsilon", "-c", "privacy='zonal'")  # 4 of 4: no sampling
    assert status == 0 and "none (every client every round)" in out


def test_show_refuses_a_bad_value_in_one_line():
    status, out, err = _cli("show", "digits", "-c", "num-server-rounds=0")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "num-server-rounds = 0" in err


def test_keys_for_a_scenario_are_the_values_it_runs_with():
    status, out, _ = _cli("keys", "--scenario", "hdp-digits")
    assert status == 0
    want = _expected({"scenario": "hdp-digits"})
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert set(rows) == set(CATALOG.keys)
    for key in ("num-clients", "privacy", "learning-rate", "num-zones"):
        assert f"default {want[key]!r} " in rows[key], rows[key]
        assert f"(key default {CATALOG.keys[key].default!r})" in rows[key]
    plain = {line.split()[0]: line for line in _cli("keys")[1].splitlines()}
    assert f"default {CATALOG.keys['num-clients'].default!r} " in plain["num-clients"]
    assert _cli("keys", "--scenario", "nope")[0] == 2


# --- config errors ------------------------------------------------------------------------


def _error(items: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        CATALOG.resolve_run_config(app_config(parse_overrides(items)))
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_string_without_quotes_names_that_pair_and_asks_for_quotes():
    text = _error(["num-server-rounds=3 privacy=global-dp seed=1"])
    assert "'privacy=global-dp'" in text and "quotes" in text
    assert "privacy='global-dp'" in text  # what to write instead
    assert "num-server-rounds" not in text and "seed" not in text  # that pair only
    bad_number = _error(["seed=1.2.3"])
    assert "'seed=1.2.3'" in bad_number and "quotes" not in bad_number


def test_text_outside_any_pair_is_refused():
    assert "'avg'" in _error(["seed=1 avg"])  # parse_config_args would drop it silently


@pytest.mark.parametrize(
    ("typo", "nearest"),
    [
        ("noise-multiplyer", "noise-multiplier"),
        ("num-server-round", "num-server-rounds"),
        ("rounds", "num-server-rounds"),
        ("learningrate", "learning-rate"),
    ],
)
def test_a_mistyped_key_suggests_the_nearest(typo, nearest):
    text = _error([f"{typo}=1"])
    assert f"did you mean {nearest}" in text, text  # the nearest first


def test_an_unrelated_key_suggests_nothing():
    assert "did you mean" not in _error(["zzzz=1"])


# --- fedpriv epsilon: a headline, the whole plan with --json ---------------------------------


def test_epsilon_prints_a_short_headline_and_json_on_request():
    items = "privacy='global-dp' noise-multiplier=1.1 num-server-rounds=20"
    cfg = _expected(parse_overrides([items]))
    plan = privacy_plan(run_spec({**cfg, "scenario-kind": "standard"}))
    status, out, _ = _cli("epsilon", "-c", items)
    assert status == 0 and len(out.splitlines()) <= 10
    eps_line = next(line for line in out.splitlines() if line.startswith("epsilon"))
    assert num(plan["epsilon"]) in eps_line and "after 20 rounds" in eps_line
    assert "upper bound" in eps_line and f"δ {num(cfg['dp-delta'])}" in eps_line
    status, out, _ = _cli("epsilon", "-c", items, "--json")
    assert status == 0 and json.loads(out) == json.loads(json.dumps(plan))


def test_epsilon_says_why_there_is_no_epsilon():
    out = _cli("epsilon", "-c", "privacy='metric-dp'")[1]
    assert "epsilon    none (metric DP is a heuristic" in out
    assert "∞ (no privacy mechanism)" in _cli("epsilon", "-c", "privacy='none'")[1]


# --- a finished run, and the files a run wrote -----------------------------------------------


def test_a_finished_run_says_how_to_run_again_and_where_verbose_lines_are(tmp_path):
    from fedpriv.scenarios.cli.launch import finished_hint

    out = tmp_path / "done"
    plain = finished_hint(str(out), verbose=False)
    assert "nothing to do" in plain and f"remove {out}" in plain and "output-dir=" in plain
    assert "\n" not in plain
    loud = finished_hint(str(out), verbose=True).splitlines()
    assert loud[0] == plain and loud[1].endswith(f"{out / 'run.log'}") and "--verbose" in loud[1]


def test_the_files_line_names_every_file_in_reading_order(tmp_path):
    from fedpriv.reporting.console import files_written

    for name in ("zeta.npz", "summary.json", "run.log", "rounds.jsonl", "a.png", "x.json.tmp"):
        (tmp_path / name).write_text("x")
    (tmp_path / "hdp").mkdir()
    assert files_written(tmp_path) == [
        "rounds.jsonl", "summary.json", "run.log", "a.png", "zeta.npz", "hdp/",
    ]  # fmt: skip
