"""Placeholder: portfolio selectors are being written."""


class KCenterSelector:
    pass


class KMedoidsSelector:
    pass


class BudgetGreedySelector:
    pass


def k_center_select(*a, **k):
    raise NotImplementedError


def k_medoids_select(*a, **k):
    raise NotImplementedError


def budget_greedy_select(*a, **k):
    raise NotImplementedError
