"""pfl-research (PyPI ``pfl`` 0.6.0) peer of ``make bench``, run in ``.venv-peers``.

``.venv-peers/bin/python bench/peers/pfl_peer.py '<json settings>'``: the digits MLP
(``tf.keras``: Keras 3, or tf-keras 2 under ``TF_USE_LEGACY_KERAS=1``) as a pfl ``TFModel``,
pfl's ``FederatedAveraging`` on its ``SimulatedBackend`` (one process), the shards of the
bench's .npz as a ``FederatedDataset`` (one user per client), ``train_cohort_size`` =
clients-per-round, 5 local epochs of SGD at the bench's rate and batch size, central SGD at 1.0
(plain FedAvg), and for ``privacy = global-dp`` pfl's ``CentrallyAppliedPrivacyMechanism`` of a
``GaussianMechanism`` (clip C, noise z·C on the sum). A callback evaluates the server test set
after each central iteration and stamps the wall clock.

Prints one JSON line: ``stamps`` (epoch seconds at each round's end), ``accuracy`` (final,
server test set), ``keras`` (the Keras version ``tf.keras`` is), ``trainable`` (the model's
trainable variables), ``aggregated`` (the names in pfl's variable map: what its FedAvg reads
and writes), ``seconds`` (from interpreter start).

Settings (JSON): ``shards``, ``num-clients``, ``clients-per-round``, ``local-epochs``,
``batch-size``, ``learning-rate``, ``rounds``, ``privacy``, ``noise-multiplier``,
``clipping-norm``, ``seed``.
"""

from __future__ import annotations

import json
import os
import sys
import time

T0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _model(cfg: dict):
    import tensorflow as tf

    keras = tf.keras
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=float(cfg["learning-rate"])),
        loss=keras.losses.SparseCategoricalCrossentropy(),
    )
    return model


def _keras_version() -> str:
    """The version of the Keras that ``tf.keras`` is (tf-keras under the legacy switch)."""
    if os.environ.get("TF_USE_LEGACY_KERAS", "0") in ("1", "true", "True"):
        import tf_keras

        return tf_keras.__version__
    import keras

    return keras.__version__


def main(cfg: dict) -> dict:
    """One pfl FedAvg run (module doc)."""
    import numpy as np
    import tensorflow as tf
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.tensorflow import TFModel

    tf.random.set_seed(int(cfg.get("seed", 0)))
    np.random.seed(int(cfg.get("seed", 0)))
    with np.load(cfg["shards"]) as data:
        arrays = {k: data[k] for k in data.files}
    n, per_round = int(cfg["num-clients"]), int(cfg["clients-per-round"]) or int(cfg["num-clients"])
    users = [str(k) for k in range(n)]
    train = {str(k): [arrays[f"x{k}"], arrays[f"y{k}"]] for k in range(n)}
    val = {str(k): [arrays[f"xt{k}"], arrays[f"yt{k}"]] for k in range(n)}
    training = FederatedDataset.from_slices(train, get_user_sampler("minimize_reuse", users))
    validation = FederatedDataset.from_slices(val, get_user_sampler("minimize_reuse", users))
    keras_model = _model(cfg)
    model = TFModel(
        model=keras_model,
        metrics={"accuracy": tf.keras.metrics.SparseCategoricalAccuracy()},
        central_optimizer=tf.keras.optimizers.SGD(1.0),
    )
    post = []
    if cfg["privacy"] == "global-dp":
        from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism

        gauss = GaussianMechanism(float(cfg["clipping-norm"]), float(cfg["noise-multiplier"]))
        post.append(CentrallyAppliedPrivacyMechanism(gauss))
    backend = SimulatedBackend(training_data=training, val_data=validation, postprocessors=post)
    test = Dataset((arrays["x_test"], arrays["y_test"]))
    stamps: list[float] = []

    class Stamp(TrainingProcessCallback):
        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            stamps.append(time.time())
            return False, Metrics()

    eval_params = NNEvalHyperParams(local_batch_size=256)
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=int(cfg["rounds"]),
            evaluation_frequency=int(cfg["rounds"]) + 1,
            train_cohort_size=per_round,
            val_cohort_size=0,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_num_epochs=int(cfg["local-epochs"]),
            local_learning_rate=float(cfg["learning-rate"]),
            local_batch_size=int(cfg["batch-size"]),
        ),
        model_eval_params=eval_params,
        callbacks=[Stamp()],
    )
    metrics = model.evaluate(test, eval_params=eval_params)
    accuracy = [float(v.overall_value) for k, v in metrics if "accuracy" in str(k)]
    return {
        "stamps": stamps,
        "accuracy": accuracy[0] if accuracy else float("nan"),
        "keras": _keras_version(),
        "trainable": [
            v.path if hasattr(v, "path") else v.name for v in keras_model.trainable_variables
        ],
        "aggregated": sorted(model.variable_map),
        "seconds": time.perf_counter() - T0,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
