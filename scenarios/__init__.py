"""The Flower app: ServerApp, ClientApp, the `fedpriv` command and one folder per feature."""

if __name__ != "fedpriv.scenarios":  # the repository folder imported under its old top-level name
    raise ImportError(
        f"'{__name__}' is now 'fedpriv.scenarios': import fedpriv.scenarios.… "
        "(fedpriv installs one top-level package, fedpriv; see docs/wrappers.md)"
    )
