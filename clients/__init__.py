"""Keras training on the clients (the only package a simulation worker loads besides
``fedpriv``).

On Python 3.13, TensorFlow's autograph builds ASTs through ``gast`` with keyword arguments
that 3.13 deprecates: every traced function then prints dozens of ``DeprecationWarning``
lines per worker. They say nothing about this code, so they are silenced here, for
``gast`` only.

JAX's persistent compilation cache is set up here, before any client module imports Keras
(and with it JAX, which reads its settings once): :mod:`fedpriv.clients.compile_cache`.
"""

if __name__ != "fedpriv.clients":  # the repository folder imported under its old top-level name
    raise ImportError(
        f"'{__name__}' is now 'fedpriv.clients': import fedpriv.clients.… (fedpriv installs one "
        "top-level package, fedpriv; see docs/wrappers.md)"
    )


import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"gast(\.|$)")

from fedpriv.clients import compile_cache  # noqa: E402

compile_cache.configure()
