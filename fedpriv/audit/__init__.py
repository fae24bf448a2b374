"""Empirical privacy auditing, Flower-free.

- :mod:`fedpriv.audit.one_run` — Steinke, Nasr & Jagielski (NeurIPS 2023), auditing with one
  training run: canaries included at random, the attacker guesses on its top / bottom scores,
  the number of correct guesses becomes an ε lower bound at a stated confidence.
- :mod:`fedpriv.audit.gaussian_pair` — exact ε(δ) of a pair of Gaussians (equal or unequal
  variances) and of the Gaussian mechanism.
- :mod:`fedpriv.audit.one_shot` — Andrew et al. (ICLR 2024), one-shot estimate: cosines of the
  model delta with inserted vs held-out random canary directions, Gaussians fitted to both,
  ε of that Gaussian pair.
- :mod:`fedpriv.audit.canaries` — seeded canary sets (directions, inclusion, updates, scores).
- :mod:`fedpriv.audit.audit` — one audit result from a canary set and the global models.
- :mod:`fedpriv.audit.lira` — offline LiRA (Carlini et al. 2022), a reference-model
  membership attack; TPR at low FPR lives in :mod:`fedpriv.attacks.membership`.
- :mod:`fedpriv.audit.report` — the audit grid report (Markdown table, ε-vs-z plot).
"""
