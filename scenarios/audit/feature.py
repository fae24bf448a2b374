"""Empirical privacy auditing of a standard run with canary clients.

With ``audit-canaries`` = K > 0 the standard run builds a
:class:`fedpriv.audit.canaries.CanarySet` (K random unit directions of norm
``audit-canary-norm``, 0 = ``clipping-norm``; each included with probability
``audit-canary-probability``) and puts :class:`fedpriv.strategies.canaries.CanaryInsertion` between
update validation and the privacy wrapper: included canaries reply in every round with the
global model plus their direction, *before* the privacy wrapper clips, measures (metric DP's d)
and noises. Global and metric DP around a uniform mean then divide the clipped sum by the
fixed m (``canary_denominator`` = ``"fixed m"``: a canary has a real client's sensitivity,
σ unchanged); elsewhere the mean divides by all replies (``"all replies"``). Canaries never
train. After the last round :func:`audit_outcome` scores the
canaries on the global models (θ_0 … θ_T), and the run writes ``audit.json`` and an ``audit``
block in summary.json:

- ``epsilon_lower_bound`` (Steinke et al. 2023, at ``audit-confidence``; inclusion
  probability 0.5 only) and ``epsilon_estimate`` (Andrew et al. 2024), for
  ``audit-threat-model`` (``final``: the last model only, named ``final-model``;
  ``every-round``: every round's model, named ``white-box``), and both threat models under
  ``threat_models``;
- ``epsilon_upper_bound``: the accountant's ε for the audited adjacency (one canary client
  added or removed, in every round; :func:`fedpriv.audit.audit.canary_upper_bound`) — global
  DP around a mean aggregator only, ``null`` for every other case; ``epsilon_upper_bound_run``:
  the run's own headline ε (real clients, the run's sampling; global DP only);
- for metric DP, ``epsilon_comparison_realised_sigma``: the same canary accounting with the
  σ each round actually used (a comparison, not a guarantee: σ depends on the data via d);
- ``audit_failed``: true when the lower bound exceeds the upper bound (a bug in the mechanism
  or the accountant: ``fedpriv audit`` then exits 1);
- ``membership``: loss-threshold membership inference on the final model (AUC, TPR at 0.1 %
  and 1 % FPR; members = the clients' training splits, non-members = their test splits) and
  the final test accuracy.

Audited privacy modes: ``none``, ``global-dp``, ``metric-dp`` (both ``distance-on``) with
canary *clients*, and ``dp-sgd`` with canary *examples* (:mod:`fedpriv.audit.example_canaries`:
DP-SGD's guarantee is example level, so its audit inserts examples into the clients'
training data; :func:`example_audit`). Zonal and IFCA refuse ``audit-canaries > 0`` with a
one-line config error: their noise is added inside their own aggregation (zones, client-side
Laplace), where a server-inserted canary would bypass it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from fedpriv.scenarios.audit.keys import KEYS
from fedpriv.scenarios.config.feature import Catalog, Command, Feature
from fedpriv.scenarios.config.schema import ConfigError

from fedpriv.privacy.modes import get, global_dp, metric_dp, mode_of, names

if TYPE_CHECKING:
    from fedpriv.scenarios.config.specs import ServerRun

    from fedpriv.audit.canaries import CanarySet
    from fedpriv.privacy.participation import Participation

# what each mode supports is its own declaration (``Mode.audit``): client-level canaries
# through the DP wrapper (``client``), example-level canaries (``example``, inserted
# examples), canaries without noise (``plain``), or no audit (None)
CLIENT_CANARIES, EXAMPLE_CANARIES = "client", "example"


def audited_modes() -> tuple[str, ...]:
    """The modes a canary audit supports."""
    return tuple(n for n in names() if get(n).audit is not None)


MEAN_STRATEGIES = ("fedavg", "fedprox")


def audit_enabled(cfg: Mapping[str, Any]) -> bool:
    """Whether this run inserts canaries."""
    return int(cfg.get("audit-canaries", 0)) > 0


def check_audit_config(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """Canaries only in standard-kind scenarios with an audited privacy mode."""
    kind = catalog.kind(cfg)
    if audit_enabled(cfg) and kind != "standard":
        raise ConfigError(
            "audit-canaries",
            cfg["audit-canaries"],
            f"0 for scenario {cfg['scenario']!r} of kind {kind!r} (canary audits run "
            "standard-kind scenarios)",
        )
    mode = mode_of(cfg)
    if audit_enabled(cfg) and mode.audit is None:
        raise ConfigError(
            "audit-canaries",
            cfg["audit-canaries"],
            "0 with privacy = " + mode.name + " (canary audits support privacy = "
            + " | ".join(audited_modes()) + ")",
        )  # fmt: skip
    if audit_enabled(cfg) and mode.audit == CLIENT_CANARIES and cfg["dp-weighting"] != "uniform":
        # example weights: a canary would carry the mean real weight and an "all replies"
        # denominator, so its sensitivity is not the accounted C·w_max/W (measured: 14x less)
        raise ConfigError(
            "dp-weighting", cfg["dp-weighting"], "uniform when audit-canaries > 0 (under "
            "example weights a canary carries no real client's weight; the audit would test "
            "a diluted canary, not the accounted sensitivity)",
        )  # fmt: skip


def canary_norm(cfg: Mapping[str, Any]) -> float:
    """``audit-canary-norm``, 0 meaning ``clipping-norm``."""
    return float(cfg["audit-canary-norm"]) or float(cfg["clipping-norm"])


def canary_set(cfg: Mapping[str, Any], weights: list[np.ndarray]) -> CanarySet:
    """The run's canaries for a model with the shapes of ``weights``."""
    from fedpriv.audit.canaries import CanarySet

    return CanarySet(
        count=int(cfg["audit-canaries"]),
        norm=canary_norm(cfg),
        probability=float(cfg["audit-canary-probability"]),
        seed=int(cfg["seed"]),
        shapes=tuple(np.asarray(w).shape for w in weights),
    )


def with_canaries(strategy, run: ServerRun, weights: list[np.ndarray] | None):
    """``CanaryInsertion`` around the privacy-wrapped ``strategy`` when auditing."""
    if not audit_enabled(run.record) or run.spec.mode.audit == EXAMPLE_CANARIES:
        return strategy
    if weights is None:
        raise ValueError("with_canaries needs the initial weights (the canaries' shapes)")
    from fedpriv.strategies.canaries import CanaryInsertion

    return CanaryInsertion(strategy, canaries=canary_set(run.record, weights))


def find_canary_wrapper(strategy) -> Optional[Any]:
    """The CanaryInsertion in a ``.strategy`` chain, or None."""
    from fedpriv.strategies.canaries import CanaryInsertion

    while strategy is not None:
        if isinstance(strategy, CanaryInsertion):
            return strategy
        strategy = getattr(strategy, "strategy", None)
    return None


def _dp_history(strategy) -> list[dict]:
    while strategy is not None:
        if hasattr(strategy, "history") and hasattr(strategy, "mechanism"):
            return list(strategy.history)
        strategy = getattr(strategy, "strategy", None)
    return []


def mechanism_text(cfg: Mapping[str, Any]) -> str:
    """What the audited mechanism is, in one line."""
    mode = mode_of(cfg)
    if mode is global_dp.MODE:
        return "server-side fixed clipping + Gaussian noise, sigma = z*C/m (SPEC 3.1)"
    if mode is metric_dp.MODE:
        return (
            f"server-side clipping + Gaussian noise, sigma = z*C/(m*d), d on "
            f"{cfg['distance-on']} client models (SPEC 3.2; canaries move d)"
        )
    return f"{cfg['strategy']} aggregation without noise"


def upper_bounds(run: ServerRun, canary, dp_history: list[dict]) -> dict[str, Any]:
    """The accountant's figures next to the audit (module docstring)."""
    from fedpriv.audit.audit import canary_upper_bound

    cfg, part = run.record, run.spec.participation
    mode, delta = run.spec.mode, float(cfg["dp-delta"])
    z, m = float(cfg.get("noise-multiplier", 0.0)), part.noise_clients
    out: dict[str, Any] = {"epsilon_upper_bound": None, "epsilon_upper_bound_run": None}
    if mode is global_dp.MODE and run.spec.strategy.strategy in MEAN_STRATEGIES:
        bound = canary_upper_bound(
            noise_multiplier=z,
            num_sampled_clients=m,
            real_reports_per_round=canary.real_reports,
            delta=delta,
            fixed_denominator=canary.denominator == "fixed m",
        )
        out["epsilon_upper_bound"] = None if bound is None else _num(bound["epsilon"])
        out["upper_bound"] = bound
    elif mode is global_dp.MODE:
        out["upper_bound_note"] = "no canary bound: the aggregate is not a weighted mean"
    if mode is global_dp.MODE:
        out["epsilon_upper_bound_run"] = _run_headline(cfg, part, len(canary.real_reports))
    if mode is metric_dp.MODE:
        clip = float(cfg["clipping-norm"])
        sigmas = [r.get("dp-sigma") for r in dp_history if r.get("dp-noised")]
        fixed = canary.denominator == "fixed m"
        mus = [
            (clip / (m * s)) if fixed else 2 * clip / ((n + 1) * s)
            for n, s in zip(canary.real_reports, sigmas)
            if s is not None and s > 0
        ]
        if mus and len(mus) == len(sigmas):
            from fedpriv.audit.gaussian_pair import gaussian_mechanism_epsilon

            mu = math.sqrt(sum(x * x for x in mus))
            out["epsilon_comparison_realised_sigma"] = _num(gaussian_mechanism_epsilon(mu, delta))
            out["comparison_note"] = (
                "FOR COMPARISON ONLY: the canary bound of global DP evaluated with the sigma "
                "metric DP actually used each round (sigma depends on the data through d)"
            )
    return out


def _run_headline(cfg: Mapping[str, Any], part: Participation, rounds: int) -> Any:
    """The headline ε of the run without canaries, by the one global-DP function: z·m/m'
    for each of ``rounds`` rounds (the canary run's history is not used: its replies include
    the canaries)."""
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon

    z = float(cfg["noise-multiplier"])
    charged = [z * part.per_round / part.noise_clients] * rounds
    report = global_dp_epsilon(
        charged, part, delta=float(cfg["dp-delta"]), weighting=str(cfg["dp-weighting"])
    )
    return _num(report.get("epsilon"))


def _num(value: Any) -> Any:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else "inf"


def audit_outcome(run: ServerRun, strategy, data: Any, predict: Any) -> Optional[dict[str, Any]]:
    """The audit of a finished run (None when the run had no canaries).

    ``predict(x) -> probabilities`` of the final model (used by example-level canaries).
    """
    cfg = run.record  # the audit's own keys
    if not audit_enabled(cfg):
        return None
    if run.spec.mode.audit == EXAMPLE_CANARIES:
        return example_audit(run, strategy, data, predict)
    canary = find_canary_wrapper(strategy)
    if canary is None:
        return None
    from fedpriv.audit.audit import audit_models

    result = audit_models(
        canary.canaries,
        canary.models,
        delta=float(cfg["dp-delta"]),
        confidence=float(cfg["audit-confidence"]),
        threat_model=str(cfg["audit-threat-model"]),
    )
    bounds = upper_bounds(run, canary, _dp_history(strategy))
    lower, upper = result["epsilon_lower_bound"], bounds["epsilon_upper_bound"]
    # the accountant composes every round's release, so it bounds both threat models
    lowers = [tm["epsilon_lower_bound"] for tm in result["threat_models"].values()]
    failed = isinstance(upper, float) and any(isinstance(lb, float) and lb > upper for lb in lowers)
    return {
        "epsilon_lower_bound": lower,
        "confidence": result["confidence"],
        "epsilon_lower_bound_fdp": result["threat_models"][result["threat_model"]].get(
            "epsilon_lower_bound_fdp"
        ),
        "epsilon_estimate": result["epsilon_estimate"],
        **bounds,
        "audit_failed": bool(failed),
        "delta": result["delta"],
        "mechanism": mechanism_text(cfg),
        "privacy": run.spec.mode_name,
        "noise_multiplier": float(cfg.get("noise-multiplier", 0.0)),
        "adjacency": "add/remove one canary client that takes part in every round (client level)",
        "threat_model": result["threat_model"],
        "threat_model_name": result["threat_model_name"],
        "rounds": result["rounds"],
        "canaries": result["canaries"],
        "canary_denominator": canary.denominator,
        "canary_rounds": {
            "inserted_per_round": canary.last_round.get("audit-canaries-inserted"),
            "real_reports_per_round": canary.real_reports,
        },
        "threat_models": result["threat_models"],
        "methods": {
            "lower_bound": "Steinke, Nasr & Jagielski, NeurIPS 2023 (one run; Cor. 5.4, App. D; "
            "Bonferroni over the guess counts tried)",
            "lower_bound_fdp": "Mahloujifar et al. 2024, one-run f-DP via jax-privacy: rejects "
            "the Gaussian trade-off curve through (epsilon, delta); its own confidence; not "
            "used for audit_failed",
            "estimate": "Andrew et al., ICLR 2024 (one-shot; cosine of the model delta with "
            "inserted vs held-out canaries, pooled-variance Gaussian fit)",
        },
    }


def membership_block(data, predict) -> dict[str, Any]:
    """Loss-threshold MIA on the final model: AUC and TPR at 0.1 % / 1 % FPR."""
    from fedpriv.attacks.membership import loss_threshold_attack, per_example_loss

    members = np.concatenate(
        [per_example_loss(predict(c.x_train), c.y_train) for c in data.clients]
    )
    non = np.concatenate([per_example_loss(predict(c.x_test), c.y_test) for c in data.clients])
    res = loss_threshold_attack(members, non)
    return {
        "attack": "loss threshold (Yeom et al.) on the final global model",
        "auc": res.auc,
        "advantage": res.advantage,
        **res.tpr_at_low_fpr,
        "fpr_resolution": res.fpr_resolution,
        "n_members": res.n_members,
        "n_nonmembers": res.n_nonmembers,
    }


def write_audit(output_dir: str | Path, block: Mapping[str, Any]) -> Path:
    """``audit.json`` of the run directory."""
    path = Path(output_dir) / "audit.json"
    path.write_text(json.dumps(block, indent=2, sort_keys=False))
    return path


def example_audit(run: ServerRun, strategy, data: Any, predict: Any) -> dict[str, Any]:
    """DP-SGD: example canaries scored by the final model's logit confidence in their label.

    Upper bound: the largest example-level ε the clients' DP-SGD accountants reported (the
    canary is one example of one client; the Poisson-sampled Gaussian's PLD/RDP, add/remove
    one example, valid for the batching the clients run). Final-model threat model only
    (the server keeps no per-round models here).
    """
    from fedpriv.audit.audit import audit_scores
    from fedpriv.audit.example_canaries import example_canaries
    from fedpriv.audit.lira import logit_confidence
    from fedpriv.privacy.dpsgd import ACCOUNTANT_TEXT

    cfg = run.record  # the audit's own keys
    canaries = example_canaries(run.spec, data)
    scores = logit_confidence(predict(canaries.x), canaries.y)
    delta = float(cfg["dp-delta"])
    result = audit_scores(
        scores, canaries.included, probability=canaries.probability, delta=delta,
        confidence=float(cfg["audit-confidence"]), fdp=False,  # Poisson: not a Gaussian curve
    )  # fmt: skip
    epsilons = _dpsgd_epsilons(strategy)
    upper = max(epsilons) if epsilons else None
    lower = result["epsilon_lower_bound"]
    failed = isinstance(lower, float) and isinstance(upper, float) and lower > upper
    return {
        "epsilon_lower_bound": lower,
        "confidence": float(cfg["audit-confidence"]),
        "epsilon_estimate": result["epsilon_estimate"],
        "epsilon_upper_bound": _num(upper),
        "epsilon_upper_bound_run": _num(upper),
        "audit_failed": bool(failed),
        "delta": delta,
        "mechanism": "client-side DP-SGD (Poisson batches), example level",
        "upper_bound_accountant": ACCOUNTANT_TEXT,
        "upper_bound_note": "an upper bound for the batching the clients run: Poisson-sampled "
        "batches, accounted as the Poisson-subsampled Gaussian (PLD/RDP)",
        "privacy": run.spec.mode_name,
        "noise_multiplier": float(cfg["noise-multiplier"]),
        "adjacency": "add/remove one training example of one client (example level)",
        "threat_model": "final",
        "rounds": int(run.spec.rounds),
        "canaries": {
            "kind": "inserted examples (uniform random pixels, random label)",
            "count": canaries.count,
            "inserted": int(canaries.included.sum()),
            "held_out": int((~canaries.included).sum()),
            "inclusion_probability": canaries.probability,
            "score": "logit-scaled confidence of the canary's label (final model)",
        },
        "threat_models": {"final": result},
        "methods": {
            "lower_bound": "Steinke, Nasr & Jagielski, NeurIPS 2023 (input-space canaries)",
            "estimate": "Gaussian fit of inserted vs held-out scores (Andrew et al.'s last step)",
        },
    }


def _dpsgd_epsilons(strategy) -> list[float]:
    while strategy is not None:
        eps = getattr(strategy, "epsilon", None)
        if isinstance(eps, dict) and hasattr(strategy, "participations"):
            return [float(v) for v in eps.values()]
        strategy = getattr(strategy, "strategy", None)
    return []


def _commands() -> tuple[Command, ...]:
    from fedpriv.scenarios.audit.commands import add_arguments, audit_command

    return (
        Command(
            "audit",
            add_arguments,
            audit_command,
            "Measure privacy with canaries and check it against the reported ε.",
            "fedpriv audit -c \"privacy='global-dp' num-server-rounds=2\"\n"
            "fedpriv audit --mechanism global-dp --z 1",
        ),
    )


FEATURE = Feature(
    name="audit",
    description="Empirical privacy auditing: canary clients / examples, one-run lower bound, "
    "one-shot estimate, fedpriv audit.",
    keys=KEYS,
    checks=(check_audit_config,),
    commands=_commands(),
)
