"""The privacy modes' declarations: disclosure policy, planning and threat model per mode.

Each feature declares its modes with :func:`declare` (``Feature.privacy_modes``), which
takes what its clients may send from :func:`fedpriv.disclosure.policy` (the policy the
ClientApp enforces), the keys its clients own from :func:`fedpriv.ownership.owned_keys`
(the ClientApp refuses a message that changes one), its figures from
:func:`fedpriv.accounting.planning.privacy_plan` and its threat model from
:data:`THREAT_MODELS` below — one sentence per party, who is trusted for what.
:class:`scenarios.feature.Catalog` refuses a mode whose declaration is incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scenarios.feature import PrivacyMode, WrapperBuilder

THREAT_MODELS: dict[str, dict[str, str]] = {
    "none": {
        "server": "trusted with everything: sees every client's model and metrics.",
        "observers": "see the released models; nothing is protected.",
    },
    "global-dp": {
        "server": "trusted to clip, noise and keep its noise secret; it sees every client's "
        "un-noised update.",
        "clients and observers": "see only noised releases: client-level (epsilon, delta)-DP.",
    },
    "metric-dp": {
        "server": "trusted as under global DP; it sees every client's un-noised update.",
        "clients and observers": "see noised releases whose noise depends on the data "
        "(a heuristic, no epsilon).",
    },
    "dp-sgd": {
        "server": "not trusted: it sees only updates trained with DP-SGD on each client.",
        "clients": "trusted with their own data and privacy settings only: example-level "
        "(epsilon, delta)-DP per client.",
    },
    "zonal": {
        "zone aggregator": "with zonal-runtime = zone-nodes (default) each zone is its own "
        "SuperNode that hosts its clients' training (it stands for their devices) and adds "
        "the HDP noise inside: trusted with its clients' data and updates in every placement. "
        "With zonal-runtime = in-server the zone arithmetic and the HDP noise run in the "
        "ServerApp: no guarantee against the ServerApp there.",
        "server": "zone-nodes: receives one aggregate per zone (noised in the clients' step "
        "under ldp, by the zone node under hdp), never one client's update; under cdp it "
        "receives clipped un-noised zone sums and adds the noise (trusted).",
        "LDP clients": "noise their own updates in their training step: only the zone node "
        "hosting them sees them un-noised.",
    },
}


def _plan(cfg: Mapping[str, Any], examples_per_client: int | None = None) -> dict:
    from fedpriv.accounting.planning import privacy_plan

    return privacy_plan(cfg, examples_per_client=examples_per_client)


def declare(name: str, wrapper: WrapperBuilder, *, summary_key: str = "privacy") -> PrivacyMode:
    """The :class:`PrivacyMode` of ``name`` with its policy, plan and threat model."""
    from fedpriv.disclosure import policy
    from fedpriv.ownership import owned_keys

    return PrivacyMode(
        name=name,
        wrapper=wrapper,
        disclosure=policy(name),
        plan=_plan,
        summary_key=summary_key,
        threat_model=THREAT_MODELS.get(name, {}),
        owned_keys=owned_keys(name),
    )
