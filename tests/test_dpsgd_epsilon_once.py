"""One ε composition per DP-SGD release, and it is the ledger's.

A DP-SGD client reports ``dp-sgd-epsilon``: the composition of the events in its own ledger
(every release, this one included). That figure used to be computed twice per release
(``client_epsilon`` in the trainer, then the ledger's composition that replaced it) and three
times under the node's own ``max-epsilon`` (its budget check composes the same events). The
real ClientApp answers two rounds; the accountant's reports are counted here, and the
reported ε is checked against an independent :func:`fedpriv.privacy.dpsgd.client_epsilon`.
"""

from __future__ import annotations

import pytest
from fedpriv.clients.keras_client import federated_data, initial_weights
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import data_spec, train_spec
from flwr.app import Context, RecordDict

from fedpriv.privacy import accounting
from fedpriv.privacy.releases import STATE_DIR_KEY
from tests.test_release_counting import DPSGD, dpsgd_message, expected_epsilon


@pytest.fixture(scope="module")
def dp():
    cfg = resolve_run_config(DPSGD)
    return cfg, initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))


@pytest.mark.parametrize("own", [{}, {"max-epsilon": 1000.0}])
def test_each_release_composes_once_and_reports_the_ledgers_epsilon(dp, tmp_path, monkeypatch, own):
    cfg, weights = dp
    reports = []
    original = accounting.PrivacyAccountant.report

    def counted(self, *args, **kwargs):
        reports.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(accounting.PrivacyAccountant, "report", counted)
    node = {"partition-id": 1, STATE_DIR_KEY: str(tmp_path / "own"), **own}
    eps, per_release = [], []
    for server_round in (1, 2):
        before = len(reports)
        reply = app(
            dpsgd_message(cfg, weights, server_round), Context(1, 1, node, RecordDict(), cfg)
        )
        assert not reply.has_error(), reply.error
        per_release.append(len(reports) - before)
        eps.append(float(reply.content["metrics"]["dp-sgd-epsilon"]))
        n = int(reply.content["metrics"]["num-examples"])
    assert per_release == [1, 1]
    assert eps == pytest.approx([expected_epsilon(cfg, n, k) for k in (1, 2)], rel=1e-6)
