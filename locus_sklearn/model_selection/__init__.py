"""Cross-validation for routers: out-of-fold predictions, and onboarding.

- :func:`cross_val_predict_proba`: each training query's P(correct)
  predicted without its fold's answers (a LocusRouter's network, unless
  ``refit=True``, saw every fold), for calibrating the cost weight on the
  training queries (:func:`~locus_sklearn.inspection.calibrate_cost_weight`).
- :class:`ModelGroupSplit`: folds of whole models; within each held-out
  model, onboarding rows and scoring rows.
- :func:`make_onboarding_scorer`: a scorer that onboards the held-out models
  of a fold with ``add_models`` and scores them on their scoring rows.

The last two together make ``GridSearchCV(LocusRouter(...), grid, cv=cv,
scoring=make_onboarding_scorer(cv)).fit(evals)`` search for the settings
that embed unseen models best.
"""

from ._cross_val import cross_val_predict_proba
from ._onboarding import ModelGroupSplit, make_onboarding_scorer

__all__ = ["ModelGroupSplit", "cross_val_predict_proba", "make_onboarding_scorer"]
