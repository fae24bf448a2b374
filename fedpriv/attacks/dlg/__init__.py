"""Deep Leakage from Gradients (DLG) against one client's shared update (GP §4.3, HDP §VII-B).

Threat model (GP-extended §5.3; Zhu et al. 2019): an honest-but-curious party sees the update
a client shares after ONE local SGD step on a batch of ONE example with a known learning rate
η, so the update is ``δ = −η·∇_W L(x, y)`` and the gradient is ``g* = −δ/η``. It recreates the
example by *gradient matching*:

    (x̂, ŷ) = argmin  Σ_ℓ ‖∇_{W_ℓ} L(x̂, softmax(ŷ)) − g*_ℓ‖²  /  Σ_ℓ ‖g*_ℓ‖²

over a dummy image x̂ (box-constrained to the data range, the attacker knows the pixel range)
and dummy label logits ŷ (DLG's soft label; ``label="idlg"`` instead reads the label off the
sign of the output-bias gradient, Zhao et al. 2020, exact for batch 1 without noise). The
problem is solved with L-BFGS (scipy ``L-BFGS-B``; value and gradient from nested TensorFlow
``GradientTape`` scopes: the gradient of a gradient, which is why the model must be twice
differentiable — sigmoid activations, as in DLG and GP's modified CNN). Normalising by
``‖g*‖²`` makes the objective scale-free (the same solver settings work for any η).

Defences measured (what the attacker sees instead of δ):

- ``sanitize_laplace`` (GP Algorithm 2, Prop. 3.1) at noise multiplier ν: θ̂ = θ + δ + ρ with
  ``ρ ~ Laplace_ε`` in R^n, ``ε = n/(ν‖δ‖)``; GP applies it *per layer* (GP-extended §5.3:
  "we apply the Laplace mechanism independently on the parameter vector of each NN layer").
- a level-0 adversary in the zonal setting (HDP §VII-B, Table IV): it receives the noisy
  global update of s zones × (k/s) clients, subtracts its own contribution and matches the rest
  (the other k − 1 clients' examples) with a batch of k − 1 dummies; see
  :func:`zonal_level0_view`.

Backend: DLG runs on the TensorFlow backend (``KERAS_BACKEND=tensorflow``, the CPU default).
The models are Keras 3, but the gradient of a gradient is taken with nested
``tf.GradientTape`` scopes; in a process on JAX the functions that differentiate
(:func:`client_gradient`, :func:`sgd_update`, :func:`dlg_reconstruct` and the experiments)
fail with one line naming KERAS_BACKEND. Building and checking models, the views of noisy
updates and the quality metrics are numpy / Keras and work on either backend.

Quality of a reconstruction: MSE, PSNR and SSIM (Gaussian-window SSIM of Wang et al. 2004,
hand-written because scikit-image's refuses the 8×8 digits: see :mod:`.quality`). LPIPS
(HDP's metric) needs downloaded network weights and is not available.
"""

from fedpriv.attacks.dlg.attack import DLGResult, dlg_reconstruct
from fedpriv.attacks.dlg.experiments import laplace_experiment, zonal_experiment
from fedpriv.attacks.dlg.model import (
    LABEL_MODES,
    PLACEMENTS,
    build_dlg_cnn,
    check_image_model,
    tensorflow_backend,
)
from fedpriv.attacks.dlg.quality import match_reconstructions, mse, psnr, ssim
from fedpriv.attacks.dlg.views import (
    client_gradient,
    gradient_from_update,
    laplace_sanitized_update,
    sgd_update,
    zonal_level0_view,
)

__all__ = [
    "LABEL_MODES",
    "PLACEMENTS",
    "DLGResult",
    "build_dlg_cnn",
    "check_image_model",
    "tensorflow_backend",
    "client_gradient",
    "sgd_update",
    "gradient_from_update",
    "laplace_sanitized_update",
    "zonal_level0_view",
    "dlg_reconstruct",
    "mse",
    "psnr",
    "ssim",
    "match_reconstructions",
    "laplace_experiment",
    "zonal_experiment",
]
