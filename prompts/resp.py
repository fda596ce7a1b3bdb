"""ReSP prompts (Jiang et al., 2024, "Retrieve, Summarize, Plan: Advancing Multi-hop Question
Answering with an Iterative Approach", Table 1), word for word.

Table 1 prints each template on one line with literal "\\n" where the prompt breaks a line;
we send real line breaks there, keeping the spaces around them as printed (" \\nKnown ...").
Its placeholders become slots: Overarching question -> ``{query}``, Sub-question ->
``{sub_question}``, Combined memory queues -> ``{memory}``, docs -> ``{refs}``. Other notes:
- curly quotes and apostrophes (”Yes”, DON’T, let’s) are sent straight;
- the printed slips stay, since they are the published text: "target problem.Your task"
  (no space), "[You Thought]:", "Question:Overarching question" (no space);
- Local Pathway: Table 1 prints "Known information: Combined memory queues", but Algorithm 1
  calls it with the sub-question and the retrieved documents (LLM_Sum([q, D_q], Prompt_local))
  and Section 4 says it answers the sub-question "based on the retrieved documents", so its
  known information is the documents (``{refs}``).
ReSP publishes a generator prompt for multi-hop QA only (its benchmarks are HotpotQA and
2WikiMultihopQA), so ``answer`` has ``multihop`` only. ReSP has no official code: there is no
"official" profile for it.
"""

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt

_PAPER = "ReSP paper, Table 1"


@dataclass(frozen=True, kw_only=True)
class ReSPPrompts(AnswerPrompts):
    """ReSP's modules: reasoner (judge, plan), dual-function summarizer, generator (answer)."""

    judge: Prompt
    plan: Prompt
    global_evidence: Prompt
    local_pathway: Prompt


PAPER = ReSPPrompts(
    judge=Prompt(
        "judge",
        "Judging based solely on the current known information and without allowing for "
        "inference, are you able to completely and accurately respond to the question {query}? "
        "\nKnown information: {memory}. \n"
        'If you can, please reply with "Yes" directly; if you cannot and need more information, '
        'please reply with "No" directly.',
        f"{_PAPER}: Reasoner, Judge",
    ),
    plan=Prompt(
        "plan",
        "You serve as an intelligent assistant, adept at facilitating users through complex, "
        "multi-hop reasoning across multiple documents. Please understand the information gap "
        "between the currently known information and the target problem.Your task is to generate "
        "one thought in the form of question for next retrieval step directly. DON'T generate "
        "the whole thoughts at once!\n DON'T generate thought which has been retrieved.\n "
        "[Known information]: {memory}\n"
        "[Target question]: {query}\n"
        "[You Thought]:",
        f"{_PAPER}: Reasoner, Plan",
    ),
    global_evidence=Prompt(
        "global_evidence",
        "Passages: {refs}\n"
        "Your job is to act as a professional writer. You will write a good-quality passage that "
        "can support the given prediction about the question only based on the information in "
        "the provided supporting passages. Now, let's start. After you write, please write "
        '[DONE] to indicate you are done. Do not write a prefix (e.g., "Response:") while '
        "writing a passage.\n"
        "Question:{query}\n"
        "Passage:",
        f"{_PAPER}: Summarizer, Global Evidence",
    ),
    local_pathway=Prompt(
        "local_pathway",
        "Judging based solely on the current known information and without allowing for "
        "inference, are you able to respond completely and accurately to the question "
        "{sub_question}? \nKnown information: {refs}. "
        'If yes, please reply with "Yes", followed by an accurate response to the question '
        '{sub_question}, without restating the question; if no, please reply with "No" '
        "directly.",
        f"{_PAPER}: Summarizer, Local Pathway (known information: the documents, per Algorithm 1)",
    ),
    answer={
        "multihop": Prompt(
            "answer_multihop",
            "Answer the question based on the given reference.\n"
            "Only give me the answer and do not output any other words.\n"
            "The following are given reference: {memory}\n"
            "Question: {query}",
            f"{_PAPER}: Generator, Response Generation",
        ),
    },
)
