"""DNAlign: DeepNote's preference data and DPO training (Wang et al., 2025, §3.4–3.5, Appendix
B.2 and D; the official thunlp/DeepNote ``src/gen_dpo_data.py``, ``select_dpo_data.py``,
``train.py``).

* ``run_align_data`` (``noterag align data``, module ``data``): per training question, sample N
  replies of four stages — vanilla RAG's answer, note initialization, query refinement,
  knowledge accumulation (``stages``) — over the official (temperature, top_p) grid, score them
  (the answer against the golds, the others with the judge prompts; ``scoring``) and keep the
  best and the worst as a preference pair; resumable, concurrent, with costs and the Appendix D
  statistics (``stats``);
* ``select_pairs`` (``noterag align select``, module ``select``): the training file, per-stage
  quotas 1,900 / 1,900 / 1,900 / 300 from seeded shuffles;
* ``train_dpo`` (``noterag align train``, module ``train``): TRL's DPOTrainer on any Hugging Face
  causal LM (needs the ``align`` extra); ``--model hf:<dir>`` then runs the result
  (``noterag.models.hf``).

Nothing here imports torch, transformers or TRL until training starts.
"""

from noterag.align.data import run_align_data
from noterag.align.scoring import PAPER_NAMES, STAGES
from noterag.align.select import DEFAULT_QUOTAS, load_pairs, select_pairs, write_training_file
from noterag.align.stats import run_statistics, statistics_table

__all__ = [
    "DEFAULT_QUOTAS",
    "PAPER_NAMES",
    "STAGES",
    "load_pairs",
    "run_align_data",
    "run_statistics",
    "select_pairs",
    "statistics_table",
    "write_training_file",
]
