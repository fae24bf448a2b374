"""What CI runs: every test of the deployment path is in a target ``.ci/run`` (= ``make ci``)
calls (a test marked ``slow`` runs in CI only when it is also ``guard`` or ``deployment``).

Read from the files, without running anything: a test file that starts Flower's own
``flower-superlink`` / ``flower-supernode`` is marked ``deployment`` and listed in the
Makefile's ``DEPLOYMENT_TESTS``, which ``make test-deployment`` runs, which ``.ci/run`` calls
(beside the guard tier, waited for before CI ends) and ``make ci`` runs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _variable(name: str) -> list[str]:
    """A Makefile variable's words (``NAME := a b \\`` continued lines)."""
    match = re.search(rf"^{name}\s*:=\s*((?:.*\\\n)*.*)$", MAKEFILE, flags=re.M)
    assert match, name
    return match.group(1).replace("\\\n", " ").split()


def _lane(word: str) -> list[str]:
    """The targets of .ci/run's ``beside`` (``"target limit"`` each) or ``joined`` line."""
    match = re.search(rf"^{word} (.+)$", CI_RUN, flags=re.M)
    assert match, word
    return [item.split()[0] for item in shlex.split(match.group(1))]


def ci_targets() -> set[str]:
    """Every make target .ci/run runs: its ``step`` lines and its background lane, each with
    its time limit in seconds."""
    steps = set(re.findall(r"^step (\S+) \d+$", CI_RUN, flags=re.M))
    lane = re.search(r"^beside (.+)$", CI_RUN, flags=re.M)
    assert lane and all(re.fullmatch(r"\S+ \d+", t) for t in shlex.split(lane.group(1)))
    return steps | set(_lane("beside"))


def _starts_flower_processes(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return "flower-superlink" in text or "flower-supernode" in text or "localflower" in text


def test_ci_runs_the_deployment_target():
    assert re.search(r"^ci:.*\n\t.*\bbash \.ci/run\b", MAKEFILE, flags=re.M)  # make ci = .ci/run
    assert ci_targets() == {
        "test", "test-guards", "results-check", "test-deployment", "test-base-install", "docs"
    }  # fmt: skip
    # the fast tier first, alone; the deployment tier in the background lane beside the
    # next steps, which CI waits for before it ends
    assert re.search(r"\A(?:.*\n)*?step test \d+\n(?:.*\n)*?beside ", CI_RUN)
    assert "test-deployment" in _lane("beside") and _lane("beside") == _lane("joined")
    recipe = re.search(r"^test-deployment:.*\n\t(.*)$", MAKEFILE, flags=re.M)
    assert (
        recipe and "$(DEPLOYMENT_TESTS)" in recipe.group(1) and "-m deployment" in recipe.group(1)
    )
    assert "-n" not in recipe.group(1).split()  # one test at a time: each is a cluster


def test_every_test_file_with_flower_processes_is_a_deployment_test():
    listed = set(_variable("DEPLOYMENT_TESTS"))
    files = {
        f"tests/{p.name}"
        for p in (ROOT / "tests").glob("test_*.py")
        if p.name != Path(__file__).name and _starts_flower_processes(p)
    }
    assert {"tests/test_deployment.py", "tests/test_example_app.py"} <= files
    assert files <= listed, files - listed
    for name in listed:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert re.search(r"pytestmark = \[[^\]]*pytest\.mark\.deployment", text), name
