"""Predictors the planner uses; each a small interface with implementations registered by name.

* :mod:`.revocation` — ``RevocationModel`` (``lstm``, ``base-rate``, ``persistence``,
  ``logistic``), ``get_revocation_model``, ``load``, ``load_pretrained``; features in
  :mod:`._revfeatures`, the LSTM in :mod:`.lstm`, evaluation in :mod:`.reveval`.
* :mod:`.earlycurve` — ``fit_curve`` (SpotTune's EarlyCurve) and the curve predictors
  (``earlycurve``, ``last-value``, ``mean-last-k``, ``power-law``); data and evaluation in
  :mod:`.curves`.
* :mod:`.throughput` — ``ThroughputModel``: seconds per step, learned online, hardware prior.

Nothing heavy (numpy, torch, scipy, scikit-learn) is imported at module level anywhere here.
"""
