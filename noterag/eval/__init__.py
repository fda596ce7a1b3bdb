"""The evaluation harness (``noterag eval``): a method run over a dataset (``runner``, its
question loop ``loop``, worker processes ``workers``, Ray ``cluster``), its rows, scores by the
papers' own metrics (``metrics``), summaries, comparisons and significance (``report``,
``significance``), merged shards (``merge``) and the reply cache (``cache``)."""

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
