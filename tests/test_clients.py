"""Keras client: model reuse, FedProx proximal term, determinism."""

import numpy as np
import pytest
from fedpriv.clients.keras_client import (
    TrainSettings,
    evaluate_local,
    federated_data,
    initial_weights,
    model_for,
    train_local,
)
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import data_spec, train_spec


@pytest.fixture(scope="module")
def digits_setup():
    cfg = resolve_run_config({"scenario": "digits"})
    data = federated_data(data_spec(cfg))
    return cfg, data, initial_weights(train_spec(cfg), data)


def _distance(a, b):
    return float(np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(a, b))))


def test_model_is_built_once_per_process(digits_setup):
    cfg, data, _ = digits_setup
    assert model_for(train_spec(cfg), data) is model_for(train_spec(cfg), data)
    assert federated_data(data_spec(cfg)) is data


def test_caches_key_on_the_typed_specs_not_on_the_config(digits_setup):
    """Configs that differ outside the data (a training key, a message's round) share the
    process's data; a variant that differs only in keys the model does not depend on
    shares its model; another model or learning rate is another cache entry."""
    from dataclasses import replace

    cfg, data, _ = digits_setup
    variant = {**cfg, "local-epochs": 7, "server-round": 3, "attack": "scale"}
    assert data_spec(variant) == data_spec(cfg) and hash(data_spec(variant)) == hash(data_spec(cfg))
    assert federated_data(data_spec(variant)) is data
    assert model_for(train_spec(variant), data) is model_for(train_spec(cfg), data)
    other = replace(train_spec(cfg), learning_rate=0.5 * train_spec(cfg).learning_rate)
    assert model_for(other, data) is not model_for(train_spec(cfg), data)
    settings = TrainSettings.from_spec(train_spec(variant), seed=9)
    assert (settings.epochs, settings.seed, settings.proximal_mu) == (7, 9, 0.0)
    prox = TrainSettings.from_spec(train_spec({**cfg, "strategy": "fedprox"}), seed=0)
    assert prox.proximal_mu == float(cfg["proximal-mu"]) > 0  # μ only under FedProx


def test_fedprox_term_pulls_local_solution_towards_global(digits_setup):
    cfg, data, w0 = digits_setup
    client = data.clients[0]
    model = model_for(train_spec(cfg), data)
    distances = []
    for mu in (0.0, 0.1, 1.0, 10.0):
        settings = TrainSettings(
            epochs=3, batch_size=16, learning_rate=3e-3, optimizer="adam", proximal_mu=mu, seed=1
        )
        w, _ = train_local(model, w0, client.x_train, client.y_train, settings)
        distances.append(_distance(w, w0))
    assert all(a > b for a, b in zip(distances, distances[1:])), distances
    assert distances[-1] < 0.5 * distances[0]


def test_proximal_step_with_mu_zero_still_learns(digits_setup):
    cfg, data, w0 = digits_setup
    client = data.clients[1]
    model = model_for(train_spec(cfg), data)
    before = evaluate_local(model, w0, client.x_test, client.y_test)["accuracy"]
    settings = TrainSettings(
        epochs=3, batch_size=16, learning_rate=3e-3, optimizer="adam", proximal_mu=0.01, seed=2
    )
    w, _ = train_local(model, w0, client.x_train, client.y_train, settings)
    after = evaluate_local(model, w, client.x_test, client.y_test)["accuracy"]
    assert after > before + 0.3


def test_same_seed_same_weights_and_optimizer_state_is_reset(digits_setup):
    cfg, data, w0 = digits_setup
    client = data.clients[2]
    model = model_for(train_spec(cfg), data)
    settings = TrainSettings(epochs=1, batch_size=16, learning_rate=3e-3, optimizer="adam", seed=5)
    a, _ = train_local(model, w0, client.x_train, client.y_train, settings)
    b, _ = train_local(model, w0, client.x_train, client.y_train, settings)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    other = TrainSettings(**{**settings.__dict__, "seed": 6})
    c, _ = train_local(model, w0, client.x_train, client.y_train, other)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_dropout_model_result_does_not_depend_on_process_history():
    """MP CNN (with Dropout): the same call gives the same weights after other calls."""
    cfg = resolve_run_config({"scenario": "synthetic-mri"})
    data = federated_data(data_spec(cfg))
    model = model_for(train_spec(cfg), data)
    w0 = initial_weights(train_spec(cfg), data)
    client = data.clients[0]
    x, y = client.x_train[:24], client.y_train[:24]
    settings = TrainSettings(epochs=1, batch_size=8, learning_rate=1e-3, optimizer="adam", seed=11)
    first, _ = train_local(model, w0, x, y, settings)
    train_local(model, w0, x, y, TrainSettings(**{**settings.__dict__, "seed": 12}))
    again, _ = train_local(model, w0, x, y, settings)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("trained", [False, True])
def test_the_final_model_is_saved_without_optimizer_state(tmp_path, trained):
    """final_model.keras holds the weights and the compile config, never Adam's moments of
    the server's own (pre)training: 1x the model, not 3x."""
    import keras
    from fedpriv.clients.keras_client import save_final_model

    from fedpriv.models import build_model

    model = build_model("digits-mlp", input_shape=(8, 8, 1), num_classes=10)
    if trained:
        model.optimizer.build(model.trainable_variables)
    weights = [np.full(w.shape, 0.5, np.float32) for w in model.get_weights()]
    save_final_model(model, weights, tmp_path / "final_model.keras")
    loaded = keras.models.load_model(tmp_path / "final_model.keras")
    assert all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), weights))
    assert loaded.loss == "sparse_categorical_crossentropy"
    size = (tmp_path / "final_model.keras").stat().st_size
    assert size < 1.5 * sum(w.nbytes for w in weights) + 40_000, size
    model.save(tmp_path / "plain.keras")  # what model.save keeps: the moments when built
    plain = (tmp_path / "plain.keras").stat().st_size
    assert (plain > 2 * size) == trained, (plain, size)
