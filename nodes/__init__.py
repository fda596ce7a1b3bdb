"""The papers' steps (``noterag.core.step`` says how a step is written). A module named after a
method holds the steps that only that method runs (``ircot``, ``flare``, ``sure``, ...). The one
exception is deliberate: Adaptive-RAG's route C runs IRCoT's steps.

The shared steps:

- ``retrieve``: the retrieval step of every method that has no retrieval rule of its own;
- ``answer``: the answer step of Adaptive-Note, DeepNote, Amber, ReSP, Adaptive-RAG and the
  single-pass and single-step baselines (the other methods answer in a step of their own);
- ``notes``: the note steps (init note, refine query, accumulate, review) of Adaptive-Note and
  DeepNote, which Amber also uses for its note;
- ``single_step``: what Chain-of-Note, Self-Refine and Self-Rerank share: the one call over the
  passages and its trace entry, and the task check, which RECOMP also uses;
- ``logprobs``: token log-probabilities, for FLARE and REPLUG;
- ``human``: the human review (the setting ``human_review``) of the note, where a method has
  one, and of the final answer.
"""
