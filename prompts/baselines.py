"""Baseline prompts: no retrieval, and vanilla RAG (the top-k passages in the answer prompt).

The papers print no baseline prompts; they say every baseline uses the same ("aligned")
generator prompt as the method. These are the official codes' baseline prompt files, vendored
byte for byte (``prompts/official/``) and rendered with ``str.format`` as the official code
renders them: the ones their ``--method base`` / ``base_wo_retri`` runs send. thunlp/Adaptive-Note
and thunlp/DeepNote ship the same ``base``, ``base_asqa``, ``base_wo_retri`` and
``base_wo_retri_asqa`` files; only DeepNote has the StrategyQA ones (``base_strategyqa``,
``base_wo_retri_strategyqa``, with 'yes'/'no' in single quotes), used for that task by both
profiles.

The passages (``{refs}``) are formatted by the profile: numbered ``[i] Title: ...`` under
``profile="paper"``; under ``profile="official"`` as the official code named by the run's
``official_code`` setting formats them (Adaptive-Note ``Passage #i Title: ...``, DeepNote
``Title: ...\\nText: ... \\n\\n``, dense runs and ASQA / StrategyQA the joined
``title\\ntext`` strings; see noterag.core.profiles).
"""

from noterag.core.prompt import AnswerPrompts
from noterag.prompts.vendored import official_prompt

_AN, _DN = "thunlp/Adaptive-Note", "thunlp/DeepNote"

VANILLA = AnswerPrompts(
    answer={
        "multihop": official_prompt(_AN, "base", "vanilla_multihop"),
        "asqa": official_prompt(_AN, "base_asqa", "vanilla_asqa"),
        "strategyqa": official_prompt(_DN, "base_strategyqa", "vanilla_strategyqa"),
    }
)

NO_RETRIEVAL = AnswerPrompts(
    answer={
        "multihop": official_prompt(_AN, "base_wo_retri", "no_retrieval_multihop"),
        "asqa": official_prompt(_AN, "base_wo_retri_asqa", "no_retrieval_asqa"),
        "strategyqa": official_prompt(_DN, "base_wo_retri_strategyqa", "no_retrieval_strategyqa"),
    }
)
