"""What CI runs: every test of the deployment path is in a target ``.ci/run`` (= ``make ci``)
calls (a test marked ``slow`` runs in CI only when it is also ``guard`` or ``deployment``).

Read from the files, without running anything: a test file that starts Flower's own
``flower-superlink`` / ``flower-supernode`` is marked ``deployment`` and listed in the
Makefile's ``DEPLOYMENT_TESTS``, which ``make test-deployment`` runs, which ``.ci/run`` calls
(beside the guard tier, waited for before CI ends) and ``make ci`` runs.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _variable(name: str) -> list[str]:
    """A Makefile variable's words (``NAME := a b \\`` continued lines)."""
    match = re.search(rf"^{name}\s*:=\s*((?:.*\\\n)*.*)$", MAKEFILE, flags=re.M)
    assert match, name
    return match.group(1).replace("\\\n", " ").split()


def _starts_flower_processes(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return "flower-superlink" in text or "flower-supernode" in text or "localflower" in text


def test_ci_runs_the_deployment_target():
    assert re.search(r"^ci:.*\n\t.*\bbash \.ci/run\b", MAKEFILE, flags=re.M)  # make ci = .ci/run
    for target in ("test", "test-guards", "results-check", "test-base-install", "docs"):
        assert re.search(rf"^step {target}$", CI_RUN, flags=re.M), target
    # the deployment tier runs beside the steps after the fast tier, and CI waits for it
    assert re.search(r"^beside test-deployment$", CI_RUN, flags=re.M)
    assert re.search(r"^joined test-deployment$", CI_RUN, flags=re.M)
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
