"""Packaging: one import namespace, ``fedpriv``.

The repository keeps the design's four folders side by side (``fedpriv/`` the math and data,
no Flower; ``strategies/``, ``clients/``, ``scenarios/`` the Flower adapters, Keras clients and
the Flower app), but the installed distribution has one top-level import name: the three
Flower folders are installed as ``fedpriv.strategies``, ``fedpriv.clients`` and
``fedpriv.scenarios`` (``package_dir``). A user's app with its own ``strategies.py``,
``clients/`` or ``scenarios/`` is therefore never shadowed by fedpriv, nor shadows it.
Everything else is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

FLOWER_FOLDERS = ("strategies", "clients", "scenarios")


def packages_and_dirs() -> tuple[list[str], dict[str, str]]:
    """``fedpriv`` and its subpackages, plus each Flower folder's packages under ``fedpriv.``."""
    packages = find_packages(include=["fedpriv", "fedpriv.*"])
    package_dir: dict[str, str] = {}
    for folder in FLOWER_FOLDERS:
        packages += [f"fedpriv.{p}" for p in find_packages(include=[folder, f"{folder}.*"])]
        package_dir[f"fedpriv.{folder}"] = folder
    return packages, package_dir


PACKAGES, PACKAGE_DIR = packages_and_dirs()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
