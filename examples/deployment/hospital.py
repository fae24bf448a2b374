"""A hospital network's fedpriv deployment: its certificates, node keys and commands.

``python examples/deployment/hospital.py certs DIR --host superlink.example.org`` writes a CA,
the SuperLink's TLS certificate (its host names in the certificate's subjectAltName) and one
ECDSA P-384 key pair per SuperNode; ``python examples/deployment/hospital.py commands DIR``
prints every party's command: the SuperLink, each SuperNode with its own ``--node-config``,
the ``flwr supernode register`` of each node key and the ``flwr run`` of each federation.
``docs/deployment.md`` walks through them; ``tests/test_deployment_guide.py`` runs them on
one machine.

Needs ``openssl`` and ``ssh-keygen`` (OpenSSH) on the machine that makes the keys. Each
SuperNode's private key, and the CA's, stay on the machine that owns them: in a real network
each hospital makes its own key pair and sends only the ``.pub`` file to the operator.
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = "/var/lib/fedpriv/state"  # each SuperNode's own folder (0700, its user's)

# what every node of a federation agrees on (the federation's run config, ``flwr run``'s
# --run-config): tiny runs, as the test runs them
DPSGD_RUN = (
    "scenario='digits' model='digits-mlp' privacy='dp-sgd' num-clients=3 clients-per-round=0 "
    "num-server-rounds=2 noise-multiplier=1.1 clipping-norm=1.0 dp-delta=1e-05 batch-size=32 "
    "local-epochs=1"
)
ZONES_RUN = (
    "scenario='digits' model='digits-mlp' privacy='zonal' noise-placement='hdp' "
    "zonal-runtime='zone-nodes' num-zones=2 num-clients=8 clients-per-round=8 "
    "num-server-rounds=2 local-epochs=1 zonal-distributed-eval='none' noise-multiplier=1.0 "
    "clipping-norm=1.0 dp-delta=1e-05"
)
PLAIN_RUN = "scenario='digits' privacy='global-dp' num-clients=3 num-server-rounds=2"
IFCA_RUN = (
    "scenario='gp-synthetic' num-clients=6 validation-clients=2 users-per-round=4 "
    "num-server-rounds=5 ifca-noise-multiplier=5.0 leakage-budget=50.0"
)
BUDGETS_RUN = (
    "scenario='digits' privacy='client-budgets' num-clients=3 clients-per-round=0 "
    "num-server-rounds=2 client-epsilon-groups='1,3,10' noise-multiplier=1.0 dp-delta=1e-05"
)


@dataclass(frozen=True)
class Node:
    """One SuperNode: its name (and key file), federation, and own node config."""

    name: str
    federation: str
    config: str  # --node-config, without client-state-dir (added per host)

    def node_config(self, state_dir: str = STATE_DIR) -> str:
        return f"{self.config} client-state-dir={_toml(state_dir)}"


def _toml(text: str) -> str:
    """A TOML string: literal ('...') when it can be, so a shell's "..." can hold it."""
    if "'" not in text and "\n" not in text:
        return f"'{text}'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shell(cmd: list[str]) -> str:
    """``cmd`` as one shell line, a value with single quotes in double quotes (readable)."""
    out = []
    for arg in cmd:
        if arg and all(c.isalnum() or c in "-_./:=@,+%" for c in arg):
            out.append(arg)
        elif not any(c in arg for c in '"$`\\!'):
            out.append(f'"{arg}"')
        else:
            out.append(shlex.quote(arg))
    return " ".join(out)


def dpsgd(i: int, n: int = 3) -> Node:
    """A DP-SGD hospital: it owns z, C, delta, B and E (its epsilon is its own)."""
    return Node(
        f"dpsgd-{i}", "dpsgd",
        f"partition-id={i} num-partitions={n} privacy='dp-sgd' noise-multiplier=1.1 "
        "clipping-norm=1.0 dp-delta=1e-05 batch-size=32 local-epochs=1",
    )  # fmt: skip


def zone(z: int, zones: int = 2, clients: int = 8) -> Node:
    """A zone node (HDP): it serves its zone's clients and owns the zonal keys."""
    return Node(
        f"zone-{z}", "zones",
        f"partition-id={z} num-partitions={zones} privacy='zonal' noise-placement='hdp' "
        f"zonal-runtime='zone-nodes' num-zones={zones} num-clients={clients} "
        "noise-multiplier=1.0 clipping-norm=1.0 dp-delta=1e-05",
    )  # fmt: skip


def plain(i: int, n: int = 3) -> Node:
    """A wrapper (plain) client: the server clips and noises; the node owns no privacy key."""
    return Node(f"plain-{i}", "plain", f"partition-id={i} num-partitions={n}")


def ifca(i: int, n: int = 6) -> Node:
    """An IFCA client (the last ``validation-clients`` partitions: held-out validation users):
    it owns its Laplace nu, its lifetime leakage budget and its validation-query budget."""
    return Node(
        f"ifca-{i}", "ifca",
        f"partition-id={i} num-partitions={n} num-clients={n} validation-clients=2 "
        "ifca-noise-multiplier=5.0 leakage-budget=50.0 validation-query-budget=500",
    )  # fmt: skip


def budgets(i: int, n: int = 3) -> Node:
    """A client-budgets client: its budget is its group's (client p in group p mod k of
    ``client-epsilon-groups``, which the node states itself) and it counts its releases.
    It does not set ``client-epsilon``: the run config leaves that key at "auto", the server
    resolves it to 0 and sends it, and a node whose own value differs refuses every message
    (docs/deployment.md, step 5)."""
    return Node(
        f"budget-{i}", "client-budgets",
        f"partition-id={i} num-partitions={n} privacy='client-budgets' "
        "client-epsilon-groups='1,3,10' noise-multiplier=1.0 dp-delta=1e-05",
    )  # fmt: skip


FEDERATIONS = {  # federation -> (its run config, its nodes)
    "dpsgd": (DPSGD_RUN, [dpsgd(i) for i in range(3)]),
    "zones": (ZONES_RUN, [zone(z) for z in range(2)]),
    "plain": (PLAIN_RUN, [plain(i) for i in range(3)]),
    "ifca": (IFCA_RUN, [ifca(i) for i in range(6)]),
    "client-budgets": (BUDGETS_RUN, [budgets(i) for i in range(3)]),
}


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_certs(out: Path, hosts: list[str], nodes: list[str]) -> None:
    """A CA, the SuperLink's certificate for ``hosts``, and a key pair per node in ``out``."""
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    sans = ",".join(
        f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in dict.fromkeys([*hosts, "localhost"])
    )
    days, ec = "365", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384", "-nodes"]
    _run(["openssl", "req", "-x509", *ec, "-days", days,
          "-keyout", str(out / "ca.key"), "-out", str(out / "ca.crt"),
          "-subj", "/CN=fedpriv hospital network CA"])  # fmt: skip
    _run(["openssl", "req", *ec,
          "-keyout", str(out / "server.key"), "-out", str(out / "server.csr"),
          "-subj", f"/CN={hosts[0]}"])  # fmt: skip
    ext = out / "server.ext"
    ext.write_text(
        f"subjectAltName = {sans}\nbasicConstraints = CA:FALSE\n"
        "keyUsage = digitalSignature\nextendedKeyUsage = serverAuth\n"
    )
    _run(["openssl", "x509", "-req", "-in", str(out / "server.csr"), "-days", days,
          "-CA", str(out / "ca.crt"), "-CAkey", str(out / "ca.key"), "-CAcreateserial",
          "-extfile", str(ext), "-out", str(out / "server.pem")])  # fmt: skip
    for name in nodes:
        key = out / name
        if not key.exists():
            _run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", name,
                  "-f", str(key)])  # fmt: skip
    for secret in (out / "ca.key", out / "server.key", *(out / n for n in nodes)):
        secret.chmod(0o600)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def superlink_command(certs: Path, *, host: str = "0.0.0.0", port: int = 9093,
                      database: str = "superlink.db") -> list[str]:  # fmt: skip
    """The SuperLink: TLS on its one port (Fleet and Control APIs), node authentication on."""
    return [
        "flower-superlink",
        "--ssl-ca-certfile", str(certs / "ca.crt"),
        "--ssl-certfile", str(certs / "server.pem"),
        "--ssl-keyfile", str(certs / "server.key"),
        "--enable-supernode-auth",
        "--disable-runtime-dependency-installation",
        "--host", host, "--port", str(port),
        "--database", database,
    ]  # fmt: skip


def register_command(certs: Path, node: str, federation: str) -> list[str]:
    """Register a node's public key with the SuperLink (``flwr`` on the operator's machine)."""
    return ["flwr", "supernode", "register", str(certs / f"{node}.pub"), federation]


def supernode_command(certs: Path, node: Node, superlink: str, *, port: int = 9094,
                      state_dir: str = STATE_DIR) -> list[str]:  # fmt: skip
    """One SuperNode: TLS to the SuperLink, its own private key, its own node config."""
    return [
        "flower-supernode",
        "--superlink", superlink,
        "--root-certificates", str(certs / "ca.crt"),
        "--auth-supernode-private-key", str(certs / node.name),
        "--node-config", node.node_config(state_dir),
        "--port", str(port),
    ]  # fmt: skip


def connection_toml(name: str, address: str, certs: Path) -> str:
    """The operator's ``$FLWR_HOME/config.toml`` entry for a federation's SuperLink."""
    return (
        f"[superlink.{name}]\naddress = {_toml(address)}\n"
        f"root-certificates = {_toml(str(certs / 'ca.crt'))}\n"
    )


def run_command(federation: str, run_config: str, *, stream: bool = True) -> list[str]:
    """Submit the fedpriv app (from the repository root) to a federation; ``--stream`` shows
    the run's log until it ends."""
    return ["flwr", "run", ".", federation, *(["--stream"] if stream else []),
            "--run-config", run_config]  # fmt: skip


def print_commands(certs: Path, superlink: str, federations: list[str]) -> None:
    host, _, port = superlink.rpartition(":")
    print("# the SuperLink host (one per federation; another port, or another host, for each)")
    for k, name in enumerate(federations):
        cmd = superlink_command(certs, port=int(port) + 100 * k, database=f"{name}.db")
        print(shell(cmd), "&")
    print("\n# the operator's machine: $FLWR_HOME/config.toml, then each node's public key")
    for k, name in enumerate(federations):
        print(connection_toml(name, f"{host}:{int(port) + 100 * k}", certs))
    for name in federations:
        for node in FEDERATIONS[name][1]:
            print(shell(register_command(certs, node.name, name)))
    print("\n# each SuperNode's host: its own state folder (0700), then the SuperNode")
    for k, name in enumerate(federations):
        for node in FEDERATIONS[name][1]:
            print(f"install -d -m 0700 {STATE_DIR}   # on {node.name}'s host")
            address = f"{host}:{int(port) + 100 * k}"
            print(shell(supernode_command(certs, node, address)), "&")
    print("\n# the operator's machine, from the fedpriv repository: one run per federation")
    for name in federations:
        print(shell(run_command(name, FEDERATIONS[name][0])))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    certs = sub.add_parser("certs", help="make the CA, the SuperLink's certificate, node keys")
    certs.add_argument("dir", type=Path)
    certs.add_argument("--host", action="append", default=[], help="the SuperLink's host name")
    commands = sub.add_parser("commands", help="print every party's command")
    commands.add_argument("dir", type=Path)
    commands.add_argument("--superlink", default="superlink.example.org:9093")
    for p in (certs, commands):
        p.add_argument("--federation", action="append", choices=sorted(FEDERATIONS))
    args = parser.parse_args(argv)
    federations = args.federation or list(FEDERATIONS)
    if args.what == "certs":
        nodes = [n.name for f in federations for n in FEDERATIONS[f][1]]
        make_certs(args.dir, args.host or ["superlink.example.org"], nodes)
        print(f"wrote {args.dir}/ca.crt, server.pem, server.key and {len(nodes)} node key pairs")
    else:
        print_commands(args.dir.resolve(), args.superlink, federations)


if __name__ == "__main__":
    main()
