"""`make results-check` fails, naming the page, when a page's command is broken or its run no
longer shows the page's claims (bench/results_check.py, bench/results_claims.py); the page
writers (bench/results_page.py, bench/gp_fig2_page.py) and the built-site image check
(scripts/check_site_images.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import results_check
from bench.gp_fig2_page import page_text
from bench.results_page import write_page

REPO = Path(__file__).resolve().parents[1]
GP = next(p for p in results_check.PAGES if p.name == "gp-fig2")


def _gp_fig2_outputs(scratch: Path, rmse: dict[tuple[int, float], float]) -> None:
    """A gp-fig2 run's top-level summary.json with one seed-0 run per (k, ν) and its page."""
    sweep = [
        {
            "overrides": {"num-hypotheses": k, "ifca-noise-multiplier": nu, "seed": 0},
            "final": {"rmse": value},
            "best_round": 5,
        }
        for (k, nu), value in rmse.items()
    ]
    run = scratch / "run"
    run.mkdir(parents=True)
    config = {"num-hypotheses": 1, "ifca-noise-multiplier": 0.0, "seed": 0}
    (run / "summary.json").write_text(json.dumps({"config": config, "sweep": sweep}))
    (scratch / "pages").mkdir()
    (scratch / "pages" / "gp-fig2.md").write_text(page_text(run))


GOOD = {(1, 0.0): 4.6, (2, 0.0): 0.54, (2, 5.0): 3.8}


def test_gp_fig2_claims_hold_on_a_run_with_the_pages_orderings(tmp_path, capsys):
    _gp_fig2_outputs(tmp_path / "gp-fig2", GOOD)
    assert results_check.check_pages([GP], [], tmp_path, check_only=True) == 0
    assert "ok   gp-fig2 (docs/results/gp-fig2.md)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("doctored", "claim"),
    [
        ({(2, 5.0): 0.3}, "RMSE does not grow with ν"),  # noise that helps: the ν ordering
        ({(1, 0.0): 0.5}, "k = 1, ν = 0: RMSE 0.500 outside"),  # one model that fits both
    ],
)
def test_a_doctored_summary_fails_naming_the_page_and_the_claim(tmp_path, capsys, doctored, claim):
    _gp_fig2_outputs(tmp_path / "gp-fig2", {**GOOD, **doctored})
    assert results_check.check_pages([GP], [], tmp_path, check_only=True) == 1
    out = capsys.readouterr().out
    assert f"FAIL gp-fig2 (docs/results/gp-fig2.md): {claim}" in out
    assert "results-check: 0/1 pages reproduced" in out


def test_a_command_that_exits_1_fails_naming_the_page(tmp_path, capsys):
    broken = [sys.executable, "-c", "raise SystemExit(1)"]  # stands in for `make`
    assert results_check.check_pages([GP], broken, tmp_path) == 1
    out = capsys.readouterr().out
    assert "FAIL gp-fig2 (docs/results/gp-fig2.md): `" in out
    assert "exited 1" in out


def test_a_page_whose_command_writes_no_page_fails(tmp_path, capsys):
    quiet = [sys.executable, "-c", "pass"]  # exits 0 but writes nothing
    assert results_check.check_pages([GP], quiet, tmp_path) == 1
    assert "FAIL gp-fig2 (docs/results/gp-fig2.md): its command wrote no page" in (
        capsys.readouterr().out
    )


def test_the_real_make_target_with_a_bad_override_fails_before_training(tmp_path):
    """`make gp-fig2` through the checker, its run config broken (an unknown key): the
    command's own one-line error, exit 1, the page named."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "fedpriv").exists():
        pytest.skip("no fedpriv entry point beside this Python")
    make = ["make", "-s", "-C", str(REPO), f"BIN={bin_dir}", "STAMP="]
    page = results_check.Page(
        GP.name,
        GP.page,
        GP.target,
        ("GP_FIG2_DIR={out}/run", "GP_FIG2_RUN_CONFIG=no-such-key=1"),
        GP.check,
    )
    assert results_check.check_pages([page], make, tmp_path) == 1
    log = (tmp_path / "gp-fig2" / "command.log").read_text()
    assert "no-such-key" in log


def test_every_page_under_docs_results_is_checked():
    pages = {p.page for p in results_check.PAGES}
    on_disk = {
        str(p.relative_to(REPO / "docs" / "results"))
        for p in (REPO / "docs" / "results").rglob("*.md")
        if p.name != "README.md"
    }
    assert on_disk == pages


def test_a_results_page_names_its_command_and_shows_its_images(tmp_path):
    report = tmp_path / "report.md"
    report.write_text("# A title\n\nbody line\n")
    figure = tmp_path / "comparison.png"
    figure.write_bytes(b"\x89PNG fake")
    page = write_page("make x", report, tmp_path / "site" / "x.md", [(figure, "x.png")])
    lines = page.read_text().splitlines()
    assert lines[0] == "# A title"
    assert lines[2].startswith("> Made by `make x` on ") and "CPUs" in lines[2]
    assert "![x](x.png)" in lines
    assert (tmp_path / "site" / "x.png").read_bytes() == b"\x89PNG fake"


def _site(tmp_path: Path, html: str) -> tuple[Path, Path]:
    source, built = tmp_path / "results", tmp_path / "html"
    (source / "audit").mkdir(parents=True)
    (built / "results" / "audit").mkdir(parents=True)
    (built / "_images").mkdir()
    (source / "a.png").write_bytes(b"image a")
    (source / "audit" / "b.png").write_bytes(b"image b")
    (built / "_images" / "a.png").write_bytes(b"image a")
    (built / "_images" / "b1.png").write_bytes(b"image b")  # Sphinx renames a clash
    (built / "results" / "audit" / "page.html").write_text(html)
    return source, built


def _check_site(source: Path, built: Path) -> subprocess.CompletedProcess:
    script = REPO / "scripts" / "check_site_images.py"
    return subprocess.run(
        [sys.executable, str(script), str(source), str(built)], capture_output=True, text=True
    )


def test_site_check_passes_when_every_image_is_shown(tmp_path):
    html = '<img src="../../_images/a.png"><p><img alt="b" src="../../_images/b1.png"/></p>'
    done = _check_site(*_site(tmp_path, html))
    assert done.returncode == 0, done.stderr
    assert "all 2 images" in done.stdout


def test_site_check_names_an_image_no_page_shows(tmp_path):
    done = _check_site(*_site(tmp_path, '<img src="../../_images/a.png">'))
    assert done.returncode == 1
    assert "audit/b.png: no page of" in done.stderr
    assert "a.png: no page" not in done.stderr


def test_site_check_names_an_img_whose_file_is_missing(tmp_path):
    html = '<img src="../../_images/a.png"><img src="../../_images/b1.png"><img src="gone.png">'
    done = _check_site(*_site(tmp_path, html))
    assert done.returncode == 1
    assert "<img src='gone.png'> has no file" in done.stderr


@pytest.mark.parametrize("page", results_check.PAGES, ids=lambda p: p.name)
def test_each_pages_reduced_command_is_a_valid_shell_script(tmp_path, page):
    """`make -n` of each page's reduced command, parsed by `sh -n`: a recipe broken by make's
    own quoting (a comma inside $(call ...) splits an argument) fails here, not after a run."""
    make = ["make", "-n", "-s", "-C", str(REPO), f"BIN={Path(sys.executable).parent}", "STAMP="]
    dry = subprocess.run(page.command(make, tmp_path), capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert f"--page {tmp_path / page.name / 'pages' / page.page}" in dry.stdout
    parsed = subprocess.run(["sh", "-n"], input=dry.stdout, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
