"""traceforge: production agent traces in, post-training data and inference plans out."""

__version__ = "0.1.0"
