"""Baseline prompts: no retrieval, and vanilla RAG (the top-k passages in the answer prompt).

The papers print no baseline prompts; they say every baseline uses the same ("aligned")
generator prompt as the method. These are the official Adaptive-Note code's baseline prompt
files (thunlp/Adaptive-Note ``prompts/en``: ``base``, ``base_asqa``, ``base_wo_retri``,
``base_wo_retri_asqa``), verbatim, the ones its ``--method base`` / ``base_wo_retri`` runs send.
The passages (``{refs}``) are formatted by the profile: numbered ``[i] Title: ...`` under
``profile="paper"``; the official code's ``Passage #i Title: ...\\nPassage #i Text: ... \\n\\n``
under ``profile="official"``. One difference remains: for ASQA the official code joins its
dense retriever's ``title\\ntext`` strings with "\\n" instead; we format ASQA passages like the
others.

Ours: no StrategyQA baseline prompt is published. The StrategyQA prompts below take DeepNote's
(Table 16) yes/no instruction — 'Only give me "yes" or "no" as your answer and do not output
any other words.' — into the layout of the multi-hop files above, with passages instead of
notes.
"""

from types import SimpleNamespace

from noterag.prompts.template import AnswerPrompts, Prompt

_CODE = "thunlp/Adaptive-Note prompts/en"
_OURS = "ours: DeepNote Table 16's yes/no instruction in the layout of"

VANILLA = AnswerPrompts(
    answer={
        "multihop": Prompt(
            "vanilla_multihop",
            "Answer the question based on the given passages. Only give me the answer and do not "
            "output any other words.\n\n"
            "The following are given passages:\n{refs}\n\n"
            "Question: {query}\n"
            "Answer:",
            f"{_CODE}/base",
        ),
        "asqa": Prompt(
            "vanilla_asqa",
            "Instruction: Write an accurate, engaging, and concise answer for the given question "
            "using only the provided passages. Use an unbiased and journalistic tone.\n\n\n"
            "Question:\n{query}\n\n\n"
            "Passages:\n{refs}\n\n",
            f"{_CODE}/base_asqa",
        ),
        "strategyqa": Prompt(
            "vanilla_strategyqa",
            'Answer the question based on the given passages. Only give me "yes" or "no" as your '
            "answer and do not output any other words.\n\n"
            "The following are given passages:\n{refs}\n\n"
            "Question: {query}\n"
            "Answer:",
            f"{_OURS} {_CODE}/base",
        ),
    }
)

NO_RETRIEVAL = AnswerPrompts(
    answer={
        "multihop": Prompt(
            "no_retrieval_multihop",
            "Only give me the answer and do not output any other words.\n\n"
            "Question: {query}\n"
            "Answer:",
            f"{_CODE}/base_wo_retri",
        ),
        "asqa": Prompt(
            "no_retrieval_asqa",
            "Instruction: Write an accurate, engaging, and concise answer for the given question. "
            "Use an unbiased and journalistic tone.\n\n"
            "Question:\n{query}\n",
            f"{_CODE}/base_wo_retri_asqa",
        ),
        "strategyqa": Prompt(
            "no_retrieval_strategyqa",
            'Only give me "yes" or "no" as your answer and do not output any other words.\n\n'
            "Question: {query}\n"
            "Answer:",
            f"{_OURS} {_CODE}/base_wo_retri",
        ),
    }
)

# A method's prompt sets per profile, as the registry reads them from a method's prompt module
# (PAPER, OFFICIAL): the official code sends these same texts.
vanilla = SimpleNamespace(PAPER=VANILLA, OFFICIAL=VANILLA)
no_retrieval = SimpleNamespace(PAPER=NO_RETRIEVAL, OFFICIAL=NO_RETRIEVAL)
