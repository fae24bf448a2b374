"""Run the vanilla-Flower peer on Flower's simulation engine: ``python run_flower.py N``.

``flwr.simulation.run_simulation`` with one SuperNode per client (``N``) and Flower's default
backend (Ray, 2 CPUs per ClientApp actor), as Flower's simulation docs show it. The settings
come from ``FLOWER_PEER_CONFIG`` (see ``flower_peer``).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from flower_peer import client, server
    from flwr.simulation import run_simulation

    run_simulation(server_app=server, client_app=client, num_supernodes=int(sys.argv[1]))
