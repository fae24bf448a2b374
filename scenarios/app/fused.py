"""One message per round for train + evaluate: the ``evaluate-in-train`` key.

Without it, round t sends two messages to every client: a train message with the global
model after round t-1, then an evaluate message with the new global model after round t
(the MP paper's protocol: every client evaluates every round's aggregated model on its test
split). Each carries the model (the MP CNN: 25.7 MB), so the model crosses twice per round.

With it (:func:`evaluate_in_train`), round t's train message (t >= 2) also asks each client
to evaluate the model it carries — the global model after round t-1 — on its test split
BEFORE training (``evaluate-received`` in the message config,
:data:`fedpriv.scenarios.app.task_names.EVALUATE_RECEIVED_KEY`);
the reply carries that evaluation in its own MetricRecord (``evaluation``), filtered as an
evaluate reply's metrics (:mod:`fedpriv.privacy.disclosure`, kind ``evaluate``: no more than an
evaluate message may return). The engine (:func:`fedpriv.scenarios.app.engine.run_rounds`) takes
that record
off every train reply (:func:`split_evaluations`) before the strategy chain sees the replies
— the privacy wrappers see exactly the train replies they see without the option — and
records round t-1 with it (distributed evaluation, server evaluation, round record, hooks).
One evaluate message follows the last round only (and a round whose successor does not run:
a budget stop).

Which clients evaluate which model: model 0 (the initial model) is evaluated on the server
only, as before; model t-1 (t = 2..N) by the clients sampled in round t, in round t's train
message; model N (and a model no train message follows) by every client, in the evaluate
message after that round. Round t's clients evaluating model t-1 is today's
"every client evaluates model t-1" only when every client trains every round, so ``auto`` (the
default) turns the option on only there (:func:`equivalence_gap`): the ``standard`` run kind,
``clients-per-round`` = all clients (``Participation.everyone``), not zonal (zone nodes and
``zonal-distributed-eval`` address evaluation their own way). ``true`` elsewhere is refused.
One difference remains: a client whose training fails (an error reply) also loses its
evaluation of model t-1, which a separate evaluate message might have returned.

Charge and checkpoint before the release still holds: model t-1 leaves the server
in round t's train message, after round t-1 was charged and checkpointed (stage ``charged``,
:mod:`fedpriv.scenarios.app.resume`); round t-1's ``recorded`` checkpoint holds the chain's state
from
before round t's sampling (:attr:`fedpriv.scenarios.app.engine.RoundState.states`), so a resume
from it
samples round t as the uninterrupted run did.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedpriv.scenarios.app.task_names import EVALUATE_RECEIVED_KEY, EVALUATION_RECORD
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import server_run

from fedpriv.privacy.modes import zonal as zonal_mode
from fedpriv.spec import RunSpec

if TYPE_CHECKING:  # the CLI imports this module for its config check: no Flower there
    from flwr.app import Message

__all__ = [
    "EVALUATE_RECEIVED_KEY",
    "EVALUATION_RECORD",
    "KEY",
    "check_evaluate_in_train",
    "equivalence_gap",
    "evaluate_in_train",
    "split_evaluations",
]

KEY = "evaluate-in-train"


def equivalence_gap(spec: RunSpec) -> str:
    """Why round t's clients evaluating model t-1 is NOT today's evaluation ("" when it is)."""
    if spec.kind != "standard":
        return f"the standard run kind (this run's kind is {spec.kind!r})"
    if spec.mode is zonal_mode.MODE:
        zonal = zonal_mode.MODE.name
        return f"a privacy mode other than {zonal!r} (zones address evaluation their own way)"
    if not spec.participation.everyone:
        return "every client training every round (clients-per-round = 0 or num-clients)"
    return ""


def evaluate_in_train(spec: RunSpec) -> bool:
    """Whether round t's train message also evaluates model t-1 (``auto``: where equivalent)."""
    value = spec.evaluate_in_train
    return not equivalence_gap(spec) if value == "auto" else bool(value)


def check_evaluate_in_train(cfg: Mapping[str, Any], catalog: Any) -> None:
    """``evaluate-in-train = true`` only where it is the same evaluation as today's (a check
    of the config being resolved: it builds that config's spec to ask)."""
    if cfg.get(KEY) is True:
        gap = equivalence_gap(server_run(cfg, catalog.kind(cfg)).spec)
        if gap:
            raise ConfigError(KEY, True, f"auto | false, or true only with {gap}")


def split_evaluations(replies: list[Message]) -> list[Message]:
    """Take the ``evaluation`` record off every train reply (in place: what is left is the
    train reply as it would be without the option) and return it as evaluate replies (same
    metadata, content ``{"metrics": evaluation}``). Error replies stay as they are and carry
    no evaluation."""
    from flwr.app import RecordDict

    evaluations = []
    for reply in replies:
        if reply.has_error() or EVALUATION_RECORD not in reply.content:
            continue
        content = reply.content
        evaluation = content[EVALUATION_RECORD]
        reply.content = RecordDict({k: v for k, v in content.items() if k != EVALUATION_RECORD})
        evaluated = copy.copy(reply)
        evaluated.content = RecordDict({"metrics": evaluation})
        evaluations.append(evaluated)
    return evaluations
