"""``flower-supernode`` that reports a heartbeat interval of 10 s (Flower's minimum) instead of
its fixed 30 s, for the deployment tests that kill a SuperNode.

Flower 1.42's SuperNode sends ``HEARTBEAT_DEFAULT_INTERVAL`` (30 s) with every heartbeat, and
the SuperLink declares it unavailable after ``HEARTBEAT_PATIENCE`` (2) intervals without one:
a killed node's messages fail 40-60 s after the kill. Flower has no option for it; this
script sets the interval of the SuperNode's two modules to ``HEARTBEAT_MIN_INTERVAL`` (the
smallest the SuperLink accepts) and runs Flower's own entry point with the same arguments
(``python tests/heartbeat_supernode.py --insecure --superlink ...``). Everything else is
Flower's SuperNode: the SuperLink still detects the crash by missed heartbeats, 16-20 s after
it. CI's deployment tests use it for the nodes they kill (tests/test_deployment.py).
"""

from __future__ import annotations

import sys

from flwr.common.constant import HEARTBEAT_MIN_INTERVAL
from flwr.supercore import heartbeat
from flwr.supernode import fleet_http_connection
from flwr.supernode.cli import flower_supernode

if __name__ == "__main__":
    # heartbeat: how often it sends one; fleet_http_connection: the interval it reports
    for module in (heartbeat, fleet_http_connection):
        if not hasattr(module, "HEARTBEAT_DEFAULT_INTERVAL"):  # another Flower: say so
            sys.exit(f"{module.__name__} has no HEARTBEAT_DEFAULT_INTERVAL: update {__file__}")
        module.HEARTBEAT_DEFAULT_INTERVAL = HEARTBEAT_MIN_INTERVAL
    sys.argv[0] = "flower-supernode"
    sys.exit(flower_supernode())
