"""What CI runs: every test of the deployment path is in a target ``.ci/run`` (= ``make ci``)
calls (a test marked ``slow`` runs in CI only when it is also ``guard`` or ``deployment``).

Read from the files, without running anything: a test file that starts Flower's own
``flower-superlink`` / ``flower-supernode`` is marked ``deployment`` and listed in the
Makefile's ``DEPLOYMENT_TESTS``, which ``make test-deployment`` runs, which ``.ci/run`` calls
(in a background lane beside the fast and guard tiers, waited for before CI ends) and
``make ci`` runs.
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


def _lanes(word: str) -> list[list[str]]:
    """The targets of each of .ci/run's ``beside`` lines (``"target limit"`` each) or
    ``joined`` lines (a lane's pid and log, then its targets)."""
    lanes = []
    for line in re.findall(rf"^{word} (.+)$", CI_RUN, flags=re.M):
        words = shlex.split(line)
        if word == "joined":
            assert words[0].startswith("${") and words[0].endswith("[@]}"), line
            words = words[1:]
        lanes.append([item.split()[0] for item in words])
    assert lanes, word
    return lanes


def ci_targets() -> set[str]:
    """Every make target .ci/run runs: its ``step`` lines and its background lanes, each
    with its time limit in seconds."""
    steps = set(re.findall(r"^step (\S+) \d+$", CI_RUN, flags=re.M))
    for line in re.findall(r"^beside (.+)$", CI_RUN, flags=re.M):
        assert all(re.fullmatch(r"\S+ \d+", t) for t in shlex.split(line)), line
    return steps | {target for lane in _lanes("beside") for target in lane}


def _starts_flower_processes(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return "flower-superlink" in text or "flower-supernode" in text or "localflower" in text


def test_ci_runs_the_deployment_target():
    assert re.search(r"^ci:.*\n\t.*\bbash \.ci/run\b", MAKEFILE, flags=re.M)  # make ci = .ci/run
    assert ci_targets() == {
        "install", "test", "test-guards", "results-check", "test-deployment",
        "test-base-install", "docs",
    }  # fmt: skip
    # the install first, alone; then the background lanes (the deployment tier among
    # them), then the fast tier and the guard tier beside them; CI waits for every lane
    assert re.search(r"\A(?:.*\n)*?step install \d+\n(?:.*\n)*?beside ", CI_RUN)
    assert re.search(r"^beside (?:.*\n)*step test \d+\nstep test-guards \d+\n", CI_RUN, re.M)
    assert any("test-deployment" in lane for lane in _lanes("beside"))
    assert sorted(_lanes("beside")) == sorted(_lanes("joined"))
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
