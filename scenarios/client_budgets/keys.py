"""Run-config keys of per-client budgets (``privacy = client-budgets``).

Both are owned by the client: a node's ``node_config`` may set its own ``client-epsilon``, and
a message that changes either is refused. The mode also reads ``noise-multiplier`` (z of the
server's Gaussian on the sum), ``clipping-norm`` and ``dp-delta``.
"""

from fedpriv.scenarios.config.schema import key, real


def _groups(value):
    from fedpriv.privacy.client_budgets import parse_groups

    parse_groups(value)
    return str(value)


KEYS = (
    key(
        "client-epsilon-groups",
        "1,3,10",
        _groups,
        "comma-separated floats > 0",
        "client-budgets: the budgets of the client groups; client p is in group p mod their number",
    ),
    key(
        "client-epsilon",
        0.0,
        real(0),
        "a float >= 0 (0 = its group's)",
        "client-budgets: this client's own epsilon budget (set in a node's node_config)",
    ),
)
