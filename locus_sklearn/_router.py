"""Placeholder: LocusRouter is being written."""


class LocusRouter:
    pass
