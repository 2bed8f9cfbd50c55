"""Placeholder: LocusEmbedder is being written."""


class LocusEmbedder:
    pass
