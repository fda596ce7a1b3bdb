"""Evaluation harness: datasets, metrics (and, later, the runner)."""

from noterag.datasets import DatasetError, Example, load_dataset, pool_corpus
from noterag.eval.metrics import aggregate, score

__all__ = [
    "DatasetError",
    "Example",
    "aggregate",
    "load_dataset",
    "pool_corpus",
    "score",
]

# The runner and its reports (appended: run a method over a dataset, summarise, compare, plot).
from noterag.eval.report import Summary, compare, plot, summarize
from noterag.eval.runner import run_eval

__all__ += ["Summary", "compare", "plot", "run_eval", "summarize"]
