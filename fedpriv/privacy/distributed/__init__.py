"""Distributed DP with secure aggregation: the Flower-free core of ``privacy = distributed-dp``.

Each client clips, rotates, scales and conditionally rounds its update, adds its share of
Skellam noise and masks it; the server learns only the modular sum of the survivors' vectors,
unmasks it and decodes the mean (Agarwal, Kairouz & Liu 2021; Kairouz, Liu & Steinke 2021;
Bonawitz et al. 2017; Bell et al. 2020). The modules, by step:

* :mod:`.rotation` — the randomised Walsh–Hadamard rotation;
* :mod:`.quantize` — clipping, conditional randomised rounding, Skellam noise, Z_m;
* :mod:`.encoding` — a client's update into Z_m and the server's sum back;
* :mod:`.shamir` — t-of-n secret sharing over GF(2^521 − 1);
* :mod:`.masks` — key agreement (X25519) and the masks' PRG (AES-CTR);
* :mod:`.secagg` — the SecAgg(+) client and server of one round;
* :mod:`.party` — a client's round across four messages; :mod:`.channel` — its shares
  sealed to their holders (AES-256-GCM);
* :mod:`.accounting` — ε of the Skellam mechanism over rounds and sampling; μ for a target ε;
* :mod:`.cost` — bytes a client sends per round; packing b-bit values;
* :mod:`.plan` — from (d, C, γ, n, t, rounds, target ε) to every party's parameters.

See ``docs/distributed-dp.md``. Nothing is imported here: import the module you need.
"""
