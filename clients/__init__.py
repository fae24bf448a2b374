"""Keras training on the clients (the only package a simulation worker loads besides
``fedpriv``).

On Python 3.13, TensorFlow's autograph builds ASTs through ``gast`` with keyword arguments
that 3.13 deprecates: every traced function then prints dozens of ``DeprecationWarning``
lines per worker. They say nothing about this code, so they are silenced here, for
``gast`` only.
"""

import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"gast(\.|$)")
