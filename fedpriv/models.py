"""Keras 3 models of the papers (``import keras``: any backend; no Flower).

- ``mp-cnn``: the MP paper's CNN (SPEC §4): Conv2D 32 relu, MaxPool 2, Conv2D 64 relu,
  MaxPool 2, Conv2D 128 relu, Flatten, Dense 64 relu, Dropout .1, Dense 32 relu,
  Dropout .1, Dense softmax. 3x3 kernels, no padding (MP does not give the kernel size).
- ``digits-cnn``: a small CNN for 8x8 digits.
- ``digits-mlp``: a one-hidden-layer MLP for digits.
- ``linear``: y = x^T theta (GP synthetic; no bias, 2 parameters for 2-d x).

``model.weights`` (kernel, bias layer by layer; Dropout's seed state is not a weight) is
the float32 list that FedAvg exchanges.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

CLASSIFIERS = ("mp-cnn", "digits-cnn", "digits-mlp")


def _mp_cnn(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            layers.Input(shape=input_shape),
            layers.Conv2D(32, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(128, 3, activation="relu"),
            layers.Flatten(),
            layers.Dense(64, activation="relu"),
            layers.Dropout(0.1),
            layers.Dense(32, activation="relu"),
            layers.Dropout(0.1),
            layers.Dense(num_classes, activation="softmax"),
        ],
        name="mp_cnn",
    )


def _digits_cnn(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            layers.Input(shape=input_shape),
            layers.Conv2D(16, 3, activation="relu", padding="same"),
            layers.MaxPooling2D(2),
            layers.Conv2D(32, 3, activation="relu", padding="same"),
            layers.Flatten(),
            layers.Dense(64, activation="relu"),
            layers.Dense(num_classes, activation="softmax"),
        ],
        name="digits_cnn",
    )


def _digits_mlp(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            layers.Input(shape=input_shape),
            layers.Flatten(),
            layers.Dense(64, activation="relu"),
            layers.Dense(num_classes, activation="softmax"),
        ],
        name="digits_mlp",
    )


def _linear(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    del num_classes
    return keras.Sequential(
        [keras.layers.Input(shape=input_shape), keras.layers.Dense(1, use_bias=False)],
        name="linear",
    )


_BUILDERS = {
    "mp-cnn": _mp_cnn,
    "digits-cnn": _digits_cnn,
    "digits-mlp": _digits_mlp,
    "linear": _linear,
}


def make_optimizer(name: str, learning_rate: float) -> keras.optimizers.Optimizer:
    """Adam or SGD with the given learning rate (Keras 3 optimizers)."""
    if name == "adam":
        return keras.optimizers.Adam(learning_rate=learning_rate)
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate)
    raise ValueError(f"optimizer {name!r}: expected adam | sgd")


def build_model(
    name: str,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    optimizer: str = "adam",
    learning_rate: float = 1e-3,
    seed: int = 0,
) -> keras.Model:
    """Build and compile model ``name``; initial weights are a function of ``seed``.

    Classifiers use sparse categorical cross-entropy on softmax outputs and report
    accuracy; ``linear`` uses mean squared error.
    """
    if name not in _BUILDERS:
        raise ValueError(f"model {name!r}: expected one of {sorted(_BUILDERS)}")
    keras.utils.set_random_seed(seed)
    model = _BUILDERS[name](tuple(input_shape), num_classes)
    if name == "linear":
        model.compile(optimizer=make_optimizer(optimizer, learning_rate), loss="mse")
    else:
        model.compile(
            optimizer=make_optimizer(optimizer, learning_rate),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
    return model
