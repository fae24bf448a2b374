"""fedpriv: privacy wrappers, clients and scenarios for Flower (the core: math and data).

Importing the package sets ``DUCC0_NUM_THREADS=1`` unless it is already set. SciPy's FFT
(ducc0, SciPy 1.17 and later; dp_accounting's PLD accountant convolves with it) otherwise
keeps a pool of idle worker threads whose fork handler joins them, and that join can wait
forever: a process that computed a PLD ε and then forked (``multiprocessing``'s fork start
method, a server forking a worker) hung in ``fork()``, about one test run in ten on this
project's machine. fedpriv's FFTs run on one thread anyway (SciPy's default ``workers=1``),
so the pool never did any work. Set the variable yourself before the first FFT to keep a pool.
"""

import os as _os

_os.environ.setdefault("DUCC0_NUM_THREADS", "1")
