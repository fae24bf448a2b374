"""The one ServerApp of ``flwr run .``: resolve the config, dispatch on the scenario kind.

The runner of each kind is declared by its feature (``Feature.runners``,
:mod:`fedpriv.scenarios.config.features`); it receives the grid, the run and the catalog. The run
(:class:`fedpriv.scenarios.config.specs.ServerRun`) is where the server builds its typed spec, once,
from the config it resolved; below this point code takes that spec (and the resolved config
only as the record it is: manifest, summary, wire config, a feature's own keys).

The runners' common engine (:mod:`fedpriv.scenarios.app.engine`: Keras, scikit-learn, matplotlib) is
imported with this module, which the simulation runner loads while Ray and the workers start
(``fedpriv.scenarios.cli.simulation_runner``), not once the federation answered.
"""

from __future__ import annotations

from fedpriv.scenarios.app import quiet

quiet.configure_process()  # before TensorFlow loads (fedpriv.scenarios.app.quiet)

from logging import ERROR, INFO  # noqa: E402

import fedpriv.scenarios.app.engine  # noqa: E402,F401  (the runners' engine, loaded with the app below)
from fedpriv.scenarios.app.multirun import run_plan  # noqa: E402
from fedpriv.scenarios.app.wire_config import set_base  # noqa: E402
from fedpriv.scenarios.cli.preflight import run_state  # noqa: E402
from fedpriv.scenarios.config.features import CATALOG  # noqa: E402
from fedpriv.scenarios.config.manifest import write_manifest  # noqa: E402
from fedpriv.scenarios.config.schema import ConfigError  # noqa: E402
from fedpriv.scenarios.config.specs import server_run  # noqa: E402
from fedpriv.scenarios.nodes.federation import FederationError  # noqa: E402
from flwr.app import Context  # noqa: E402
from flwr.common import log  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from fedpriv.data import DataError  # noqa: E402
from fedpriv.privacy.ledger.server import ServerLedgerError  # noqa: E402

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Resolve and check the run config, then run the scenario's kind."""
    try:
        cfg = CATALOG.resolve_run_config(context.run_config)
    except (ConfigError, DataError) as err:
        log(ERROR, "%s", err)
        raise SystemExit(2) from err
    set_base(context.run_config)
    run = server_run(cfg, CATALOG.kind(cfg))  # the server's spec: built here, once
    spec = run.spec
    if spec.run_plan:  # many runs in this one simulation (fedpriv grid, fedpriv attack cia)
        run_plan(grid, run, CATALOG)  # each cell's runner checks its own output directory
        return
    try:  # refuses a directory holding another config's run
        state = run_state(spec.output_dir, run.record, CATALOG.completion(spec.kind))
    except ConfigError as err:
        log(ERROR, "%s", err)
        raise SystemExit(2) from err
    if state.action == "finished":  # every kind: a finished run is not re-run
        log(INFO, "%s holds a finished run of this config; nothing to do", spec.output_dir)
        return
    write_manifest(spec.output_dir, run.record)
    try:
        CATALOG.runners[spec.kind](grid, run, CATALOG)
    except FederationError as err:  # e.g. 4 SuperNodes for a 100-client scenario
        log(ERROR, "federation error: %s", err)
        raise SystemExit(2) from err
    except ServerLedgerError as err:  # its state folder refused, before any training
        log(ERROR, "%s", err)
        raise SystemExit(2) from err
