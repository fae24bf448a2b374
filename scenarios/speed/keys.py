"""Run-config keys of the ``speed`` feature: image size and the GPU-path switches.

- ``image-size`` — side of the MP image datasets' images: 128 (MP's, the default), 64 or 32
  (block-averaged, :mod:`fedpriv.data.resize`; a labelled deviation from MP). Other datasets
  ignore it.
- ``jit-compile`` — on the TensorFlow backend, compile each local training step with XLA
  (``tf.function(jit_compile=True)``; the step has static shapes, :mod:`fedpriv.clients.compiled`).
  Off by default; moot on JAX, which always compiles the whole call with XLA.
- ``mixed-precision`` — build the model under Keras' ``mixed_float16`` policy (float16 compute,
  float32 variables) with dynamic loss scaling. Off by default; not with DP-SGD (its
  per-example clipping and noise are computed in float32).
- ``op-determinism`` — TensorFlow op determinism (``enable_op_determinism``), on by default so
  the same seed gives the same weights; turn it off on a GPU whose kernels have no
  deterministic implementation or to trade reproducibility for speed. No effect on JAX.
- ``evaluate-in-train`` — one message per round for train + evaluate
  (:mod:`fedpriv.scenarios.app.fused`): round t's train message also asks each client to evaluate
  the model
  it carries (the global model after round t-1) on its test split before training; one evaluate
  message follows the last round only. ``auto`` (the default): on where that is the same
  evaluation as today's (every client trains every round, standard run kind, not zonal),
  off elsewhere; ``true`` elsewhere is refused.
- ``num-workers`` — W, the simulation's worker SuperNodes
  (:mod:`fedpriv.scenarios.nodes.virtual_grid`): the ``num-clients`` clients run as virtual
  clients, dealt round-robin to W SuperNodes, each
  served with its own Context; one message per worker and round. ``auto`` (the default): the
  actors the backend can run at once (its CPUs over the client's ``num-cpus``; on a GPU
  federation one per GPU, whose clients train as one cohort on the device), at most
  ``num-clients``; ``num-workers = num-clients`` is the one-SuperNode-per-client path. Only
  for the scenario kinds in :data:`WORKER_KINDS` (others keep one SuperNode per client). With
  zone SuperNodes (``zonal-runtime = zone-nodes``) W < s workers serve the s zones instead,
  zone z on worker ``z mod W``, each zone as its own node
  (:class:`fedpriv.scenarios.nodes.virtual_grid.
  ZoneWorkerGrid`); W >= s is one SuperNode per zone. The Deployment Engine is unchanged (one
  client, or one zone, per SuperNode).
- ``cohort-training`` — on a worker SuperNode (and a zone SuperNode), the clients of one
  message train as a cohort (:mod:`fedpriv.clients.cohort`): each client runs its own handler, and
  their Keras training calls of one shape run as ONE compiled call (a map over the clients,
  each on its own data, seed and noise seed), their evaluations of one model as one forward
  pass. On by default; ``false`` trains client by client (the same results up to the
  floating-point schedule: the reference of the equivalence tests).
"""

from __future__ import annotations

from fedpriv.scenarios.config.schema import boolean, key

from fedpriv.data.resize import IMAGE_SIZES


def _auto_or_bool(value):
    if value != "auto" and not isinstance(value, bool):
        raise ValueError("not auto or a bool")
    return value


def _auto_or_count(value):
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("not auto or an integer >= 1")
    return int(value)


# the run kinds whose runners address virtual clients on worker SuperNodes
WORKER_KINDS = frozenset({"standard", "ifca", "cia"})


def _image_size(value):
    if isinstance(value, bool) or value not in IMAGE_SIZES:
        raise ValueError("not an allowed image size")
    return int(value)


KEYS = (
    key(
        "image-size",
        128,
        _image_size,
        " | ".join(str(s) for s in IMAGE_SIZES),
        "side of the MP image datasets' images (128 = MP; 64/32 are a labelled deviation)",
    ),
    key("jit-compile", False, boolean, "true | false", "XLA-compile each local training step"),
    key(
        "mixed-precision",
        False,
        boolean,
        "true | false",
        "mixed_float16 compute with float32 variables and loss scaling",
    ),
    key(
        "op-determinism",
        True,
        boolean,
        "true | false",
        "TensorFlow op determinism (same seed, same weights)",
    ),
    key(
        "evaluate-in-train",
        "auto",
        _auto_or_bool,
        "auto | true | false",
        "round t's train message also evaluates the model after round t-1 (one message per "
        "round; auto = on where every client trains every round)",
    ),
    key(
        "num-workers",
        "auto",
        _auto_or_count,
        "auto | an integer >= 1",
        "worker SuperNodes of the simulation, each serving its share of the clients "
        "(auto = the backend's CPUs, one per GPU on a GPU federation; num-clients = one "
        "SuperNode per client)",
    ),
    key(
        "cohort-training",
        True,
        boolean,
        "true | false",
        "a worker's (or zone node's) clients of one message train and evaluate in one "
        "compiled call (false: client by client)",
    ),
)


def cohort_training(cfg) -> bool:
    """The node's own ``cohort-training`` (on when its config predates the key)."""
    return bool(cfg.get("cohort-training", True))


def simulation_workers(
    cfg: dict, kinds: set[str], cpus: float, cpus_per_client: float
) -> int | None:
    """W, the worker SuperNodes of the simulation of ``cfg`` whose cells are of ``kinds``,
    or None for one SuperNode per client (a kind outside :data:`WORKER_KINDS`, or a config
    without the key). ``auto``: ``cpus // cpus_per_client`` (at least 1); always at most
    ``num-clients``."""
    value = cfg.get("num-workers")
    if value is None or not kinds or not kinds <= WORKER_KINDS:
        return None
    if value == "auto":
        value = auto_workers(cpus, cpus_per_client)
    return min(int(value), int(cfg["num-clients"]))


def zone_worker_count(cfg: dict, zones: int, cpus: float, cpus_per_client: float) -> int | None:
    """W, the worker SuperNodes that serve the ``zones`` zone nodes of a simulation
    (:class:`fedpriv.scenarios.nodes.virtual_grid.ZoneWorkerGrid`), or None for one SuperNode per
    zone (``num-workers`` >= the zones). ``auto``: as for clients (:func:`auto_workers`)."""
    value = cfg.get("num-workers", "auto")
    if value == "auto":
        value = auto_workers(cpus, cpus_per_client)
    return int(value) if int(value) < zones else None


def auto_workers(cpus: float, cpus_per_client: float) -> int:
    """``num-workers = auto``: the actors the backend runs at once, ``cpus // cpus_per_client``
    (at least 1)."""
    return max(1, int(cpus // max(float(cpus_per_client), 1e-9)))
