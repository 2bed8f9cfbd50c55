"""Cross-validation of onboarding: hold models out, onboard them, score them.

- :class:`ModelGroupSplit`: folds of whole models; within each held-out
  model, onboarding rows and scoring rows.
- :func:`make_onboarding_scorer`: a scorer that onboards the held-out models
  of a fold with ``add_models`` and scores them on their scoring rows.

Together they make ``GridSearchCV(LocusRouter(...), grid, cv=cv,
scoring=make_onboarding_scorer(cv)).fit(evals)`` search for the settings
that embed unseen models best.
"""

from ._onboarding import ModelGroupSplit, make_onboarding_scorer

__all__ = ["ModelGroupSplit", "make_onboarding_scorer"]
