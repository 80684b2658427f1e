"""The version of fusec (in cache keys: a new version never reads an old cache)."""

__version__ = "0.1.0"
