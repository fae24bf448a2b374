"""Partitioners: IID, label-Dirichlet, exact class-count tables (MP), train/test splits.

All functions are pure: randomness comes only from the ``rng`` (``numpy.random.Generator``) or
integer ``seed`` argument. Index lists returned by partitioners are disjoint, sorted int64 arrays
into the label vector they were given (one array per client, index = partition id).

MP class-count tables (rows = clients, columns = classes 0 Mild, 1 Moderate, 2 Non, 3 Very mild
demented; MP §7.1, Tables 2, 3, 8). Every table's columns add up to the training totals
(724, 49, 2566, 1781) = 5120 images. MP Table 8 (client-inference attack) as printed has client 2
with 180 images of class 0, so its rows add up to 5220 images and 824 of class 0, more than the
training set holds; :data:`MP_CIA` reads client 2's class 0 as 80 (see :data:`CIA_READING`).

When a training set has fewer images of a class than a table's column asks for (a smaller copy of
the data, a different train/test split, a tiny test fixture), :func:`largest_remainder_scale`
shrinks that column proportionally (largest-remainder rounding) to what exists; columns that fit
are kept exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv import seeds
from fedpriv.data.types import ClientData, DataError
from fedpriv.seeds import derive_seed

TRAIN_TOTALS = (724, 49, 2566, 1781)
TEST_TOTALS = (172, 15, 634, 459)

MP_HOMOGENEOUS = np.array(
    [[181, 12, 641, 446], [181, 12, 642, 445], [181, 12, 642, 445], [181, 13, 641, 445]],
    dtype=np.int64,
)
MP_NON_IID = np.array(
    [[280, 16, 881, 615], [107, 13, 368, 280], [257, 17, 1054, 720], [80, 3, 263, 166]],
    dtype=np.int64,
)
MP_CIA_AS_PRINTED = np.array(
    [[120, 9, 1122, 496], [180, 11, 894, 506], [524, 29, 550, 779]], dtype=np.int64
)
MP_CIA = np.array([[120, 9, 1122, 496], [80, 11, 894, 506], [524, 29, 550, 779]], dtype=np.int64)
CIA_READING = (
    "MP Table 8 as printed gives client 2 180 images of class 0 (rows add up to 5220 images and "
    "824 of class 0, more than the 5120 / 724 of the training set); fedpriv reads client 2's "
    "class 0 as 80, which makes every column equal the training totals (724, 49, 2566, 1781)."
)
MP_TABLES = {"homogeneous": MP_HOMOGENEOUS, "non-iid": MP_NON_IID, "cia": MP_CIA}
TABLE_SOURCES = {
    "homogeneous": "MP Table 2",
    "non-iid": "MP Table 3",
    "cia": "MP Table 8 (client 2 class 0 read as 80)",
}


def _is_classification(y: np.ndarray) -> bool:
    return np.issubdtype(np.asarray(y).dtype, np.integer)


def apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Split the integer ``total`` proportionally to ``weights`` (largest-remainder method).

    quota_i = total · w_i / Σw; each part gets ⌊quota_i⌋, and the total − Σ⌊quota⌋ leftover units
    go to the largest remainders (ties: lower index first). Σ result = total.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if total < 0 or np.any(weights < 0):
        raise ValueError(f"apportion: total = {total} and weights must be >= 0")
    if weights.sum() == 0:
        if total:
            raise ValueError("apportion: weights sum to 0 but total > 0")
        return np.zeros(len(weights), dtype=np.int64)
    quota = total * weights / weights.sum()
    base = np.floor(quota).astype(np.int64)
    left = int(total - base.sum())
    order = np.argsort(-(quota - base), kind="stable")
    base[order[:left]] += 1
    return base


def largest_remainder_scale(table: np.ndarray, available_per_class) -> np.ndarray:
    """Shrink each column of a class-count ``table`` to fit ``available_per_class``.

    For class j with column total T_j = Σ_i table[i, j] and a_j available examples:
    a_j >= T_j → the column is kept exactly; a_j < T_j → the a_j examples are apportioned over
    the rows proportionally to table[:, j] with largest-remainder rounding. The result never asks
    for more examples of a class than exist.
    """
    table = np.asarray(table, dtype=np.int64)
    avail = np.asarray(available_per_class, dtype=np.int64)
    if table.ndim != 2 or avail.shape != (table.shape[1],):
        raise ValueError(
            f"largest_remainder_scale: table shape {table.shape} and available_per_class shape "
            f"{avail.shape} do not match (expected (clients, classes) and (classes,))"
        )
    out = table.copy()
    for j in range(table.shape[1]):
        if avail[j] < table[:, j].sum():
            out[:, j] = apportion(int(avail[j]), table[:, j])
    return out


def split_by_class_counts(y: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> list:
    """Exact class-count split: client i gets ``counts[i, j]`` examples of class j.

    Within each class the examples are shuffled by ``rng`` and dealt out in consecutive blocks,
    so clients are disjoint. Raises :class:`DataError` (key ``counts``) when a class has fewer
    examples than its column asks for.
    """
    y = np.asarray(y)
    counts = np.asarray(counts, dtype=np.int64)
    if counts.ndim != 2 or np.any(counts < 0):
        raise DataError("counts", counts.shape, "a (clients, classes) array of counts >= 0")
    parts: list[list[np.ndarray]] = [[] for _ in range(counts.shape[0])]
    for j in range(counts.shape[1]):
        idx = np.flatnonzero(y == j)
        need = int(counts[:, j].sum())
        if need > len(idx):
            raise DataError(
                "counts",
                f"class {j}: {need}",
                f"at most {len(idx)} examples of class {j} (what the labels hold)",
                problem=f"the table asks for {need} examples of class {j}",
            )
        idx = rng.permutation(idx)
        ends = np.cumsum(counts[:, j])
        for i, block in enumerate(np.split(idx[:need], ends[:-1])):
            parts[i].append(block)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def iid_partition(y: np.ndarray, num_clients: int, rng: np.random.Generator) -> list:
    """Stratified equal split: client sizes and per-class counts differ by at most one.

    The indices are shuffled, sorted by label (stable) and dealt round-robin; for float targets
    (regression) the shuffled indices are dealt without sorting.
    """
    y = np.asarray(y)
    n = len(y)
    if num_clients < 1 or n < 2 * num_clients:
        raise DataError(
            "num-clients", num_clients, f"an integer in [1, {n // 2}] (>= 2 examples per client)"
        )
    order = rng.permutation(n)
    if _is_classification(y):
        order = order[np.argsort(y[order], kind="stable")]
    return [np.sort(order[i::num_clients]).astype(np.int64) for i in range(num_clients)]


BOOTSTRAP_SIZE = 20


def bootstrap_partition(n: int, num_clients: int, rng: np.random.Generator) -> list:
    """Cross-device scale: each client holds ``BOOTSTRAP_SIZE`` distinct examples drawn
    uniformly from the pool, independently of the other clients (clients overlap).

    For federations larger than the pool (10,000 virtual clients on 1,437 digits), where
    a disjoint split cannot give every client two examples. Not a paper protocol.
    """
    if num_clients < 1:
        raise DataError("num-clients", num_clients, "an integer >= 1")
    size = min(BOOTSTRAP_SIZE, n)
    return [np.sort(rng.choice(n, size=size, replace=False)) for _ in range(num_clients)]


def dirichlet_partition(
    y: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    min_size: int = 10,
    max_tries: int = 100,
) -> list:
    """Label-skew split: for each class c, shares p_c ~ Dirichlet(α·1_K) over the K clients.

    Class c's shuffled examples are cut at the cumulative shares. Small α gives each class to few
    clients (strong skew); large α approaches IID. Draws are repeated (up to ``max_tries``) until
    every client has at least ``min_size`` examples; if that never happens, examples are moved one
    at a time from the largest client to the smallest (a random example each time) until it holds.
    """
    y = np.asarray(y)
    n = len(y)
    if not alpha > 0:
        raise DataError("dirichlet-alpha", alpha, "a float > 0")
    if num_clients < 1 or n < num_clients * min_size:
        raise DataError(
            "num-clients",
            num_clients,
            f"an integer in [1, {n // min_size}] (each client needs >= {min_size} of {n} examples)",
        )
    classes = np.unique(y)
    parts: list[np.ndarray] = []
    for _ in range(max_tries):
        blocks: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(num_clients, float(alpha)))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
            for k, block in enumerate(np.split(idx, cuts)):
                blocks[k].append(block)
        parts = [np.concatenate(b) for b in blocks]
        if min(len(p) for p in parts) >= min_size:
            break
    while min(len(p) for p in parts) < min_size:
        sizes = [len(p) for p in parts]
        big, small = int(np.argmax(sizes)), int(np.argmin(sizes))
        pick = int(rng.integers(len(parts[big])))
        parts[small] = np.append(parts[small], parts[big][pick])
        parts[big] = np.delete(parts[big], pick)
    return [np.sort(p).astype(np.int64) for p in parts]


def stratified_train_test(x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int) -> tuple:
    """Split into ``(x_train, y_train, x_test, y_test)`` (``ClientData`` field order).

    The test part has n_test = ⌈test_fraction · n⌉ examples (at least 1, at most n − 1). For
    integer labels it is stratified: n_test is apportioned over the classes proportionally to
    their counts n_c (largest remainder, :func:`apportion`), so every class gets
    ``|t_c − test_fraction · n_c| < 1`` test examples, and rare classes never make the split fail.
    Float (regression) targets get a plain shuffled split. Both parts come back shuffled;
    randomness is ``numpy.random.default_rng(seed)`` only.
    """
    x, y = np.asarray(x), np.asarray(y)
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction = {test_fraction!r}; expected a float in (0, 1)")
    n = len(y)
    if n < 2 or len(x) != n:
        raise DataError(
            "num-clients", f"{n} examples", "at least 2 examples per split (and len(x) == len(y))"
        )
    rng = np.random.default_rng(seed)
    n_test = min(max(int(np.ceil(test_fraction * n - 1e-9)), 1), n - 1)
    if _is_classification(y):
        classes, inverse = np.unique(y, return_inverse=True)
        per_class = apportion(n_test, np.bincount(inverse, minlength=len(classes)))
        test = np.concatenate(
            [rng.permutation(np.flatnonzero(inverse == c))[:k] for c, k in enumerate(per_class)]
        )
    else:
        test = rng.permutation(n)[:n_test]
    is_test = np.zeros(n, dtype=bool)
    is_test[test] = True
    train = rng.permutation(np.flatnonzero(~is_test))
    test = rng.permutation(test)
    return x[train], y[train], x[test], y[test]


def table_partition(
    y: np.ndarray, partition: str, num_clients: int, rng: np.random.Generator
) -> tuple[list, np.ndarray, bool]:
    """Split by an MP table (``homogeneous`` | ``non-iid`` | ``cia``).

    Returns ``(index lists, counts used, scaled)``; ``scaled`` is True when the table had to be
    shrunk with :func:`largest_remainder_scale` because ``y`` has fewer examples of some class.
    Raises :class:`DataError` naming ``num-clients`` when it differs from the table's rows.
    """
    table = MP_TABLES[partition]
    if num_clients != table.shape[0]:
        raise DataError(
            "num-clients",
            num_clients,
            f"{table.shape[0]} for partition {partition} ({TABLE_SOURCES[partition]} has "
            f"{table.shape[0]} clients)",
        )
    available = np.bincount(np.asarray(y), minlength=table.shape[1])[: table.shape[1]]
    counts = largest_remainder_scale(table, available)
    return split_by_class_counts(y, counts, rng), counts, bool(np.any(counts != table))


def make_clients(
    x: np.ndarray, y: np.ndarray, parts: list, seed: int, test_fraction: float = 0.2
) -> list[ClientData]:
    """One :class:`ClientData` per index list: a stratified (1 − f)/f train/test split each."""
    clients = []
    for i, idx in enumerate(parts):
        if len(idx) < 2:
            raise DataError(
                "num-clients",
                len(parts),
                "fewer clients or more data (each client needs >= 2 examples)",
                problem=f"client {i} would get {len(idx)} example(s)",
            )
        split = stratified_train_test(
            x[idx], y[idx], test_fraction, derive_seed(seed, "client-split", i)
        )
        clients.append(ClientData(*split))
    return clients


def server_split(x: np.ndarray, y: np.ndarray, seed: int, fraction: float = 0.2) -> tuple:
    """Hold out a stratified ``fraction`` for the server and halve it (stratified).

    Returns ``(x_rest, y_rest, x_val, y_val, x_test, y_test)``.
    """
    x_rest, y_rest, x_srv, y_srv = stratified_train_test(
        x, y, fraction, derive_seed(seed, "server-split")
    )
    x_val, y_val, x_test, y_test = stratified_train_test(
        x_srv, y_srv, 0.5, derive_seed(seed, "val-test-split")
    )
    return x_rest, y_rest, x_val, y_val, x_test, y_test


def class_counts(parts: list, y: np.ndarray, num_classes: int) -> list[list[int]]:
    """Per-client class counts of index lists (for ``info``)."""
    return [np.bincount(y[p], minlength=num_classes).tolist() for p in parts]


def image_partition(
    x: np.ndarray,
    y: np.ndarray,
    *,
    partition: str,
    num_clients: int,
    seed: int,
    dirichlet_alpha: float,
    num_classes: int,
) -> tuple[list, dict]:
    """Partition an image training pool; returns ``(index lists, info)``.

    ``iid`` → :func:`iid_partition`; ``dirichlet`` → :func:`dirichlet_partition`;
    ``bootstrap`` → :func:`bootstrap_partition` (overlapping clients, for scale tests);
    ``homogeneous`` / ``non-iid`` / ``cia`` → :func:`table_partition`.
    """
    rng = seeds.stream(seed, "partition")
    info: dict = {}
    if partition == "iid":
        parts = iid_partition(y, num_clients, rng)
    elif partition == "bootstrap":
        parts = bootstrap_partition(len(y), num_clients, rng)
        info["bootstrap_size"] = min(BOOTSTRAP_SIZE, len(y))
    elif partition == "dirichlet":
        parts = dirichlet_partition(y, num_clients, dirichlet_alpha, rng)
        info["dirichlet_alpha"] = float(dirichlet_alpha)
    else:
        parts, counts, scaled = table_partition(y, partition, num_clients, rng)
        info["table"] = TABLE_SOURCES[partition]
        info["table_scaled"] = scaled
        if partition == "cia":
            info["cia_reading"] = CIA_READING
    info["client_class_counts"] = class_counts(parts, y, num_classes)
    return parts, info


def image_clients(
    x: np.ndarray, y: np.ndarray, *, num_classes: int, **partition_args: Any
) -> tuple[list[ClientData], dict]:
    """:func:`image_partition` of the pool, then :func:`make_clients` (one split per client)."""
    parts, info = image_partition(x, y, num_classes=num_classes, **partition_args)
    return make_clients(x, y, parts, partition_args["seed"]), info


def check_partition(dataset: str, partition: str, allowed: tuple[str, ...]) -> None:
    """Raise :class:`DataError` naming ``partition`` when it does not apply to ``dataset``."""
    if partition not in allowed:
        raise DataError(
            "partition", partition, "one of " + " | ".join(allowed) + f" for dataset {dataset}"
        )


def check_table_clients(partition: str, num_clients: int) -> None:
    """An MP-table partition (MP Tables 1, 2, 4) fixes ``num-clients`` to its rows."""
    if partition in MP_TABLES and num_clients != MP_TABLES[partition].shape[0]:
        rows = MP_TABLES[partition].shape[0]
        raise DataError(
            "num-clients", num_clients, f"{rows} for partition {partition} "
            f"({TABLE_SOURCES[partition]} has {rows} clients)",
        )  # fmt: skip
