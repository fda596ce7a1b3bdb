"""Self-RAG's prompt format (Asai et al., ICLR 2024, "Self-RAG: Learning to Retrieve, Generate,
and Critique through Self-Reflection"), word for word from the authors' code, AkariAsai/self-rag
at commit 1fcdc420e48f50a7d7ab1ece5494221b93252e99 (``retrieval_lm/``).

Self-RAG has no instruction-following prompt of its own: the Self-RAG model was fine-tuned on
the Alpaca format, and ``run_short_form.py`` builds every call from these pieces::

    prompt = PROMPT_DICT["prompt_no_input"].format_map(row)          # row["instruction"]
    decision:   prompt                                               # its first token: Retrieve
    passage d:  prompt + "[Retrieval]<paragraph>{0}\\n{1}</paragraph>".format(d["title"], d["text"])
    no passage: prompt + "[No Retrieval]"

- ``instruction``: for open-domain QA (PopQA, TriviaQA) ``preprocess_input_data`` finds no
  ``TASK_INST`` entry, so the instruction is the question itself. FlashRAG's SelfRAGPipeline
  uses ``"Answer the following question, give me a short answer.\\n\\n## Input:\\n\\n{question}"``
  for such datasets (its ``normal_qa``): a prompt override (``instruction``) gives that.
- ``prompt_no_input``, ``paragraph`` and ``no_retrieval`` are the original's strings; the
  passage is "title, newline, text" as ``call_model_rerank_w_scores_batch`` formats it
  (FlashRAG puts its ``contents`` field there).

Every call is one completion of the raw string: the model must receive exactly these bytes,
after its BOS token, with no chat markup around them. Through an OpenAI-compatible chat
endpoint that is the server's chat template's job: ``RAW_CHAT_TEMPLATE`` (ours) is the template
to serve a Self-RAG model with (graphs/self_rag.py, "Serving the model").
"""

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt

REPOSITORY = "AkariAsai/self-rag"
COMMIT = "1fcdc420e48f50a7d7ab1ece5494221b93252e99"


def _source(path: str, where: str) -> str:
    return f"{REPOSITORY} {path} @ {COMMIT[:7]}: {where}"


# A chat template that passes the user message through untouched, after the BOS token that
# vLLM's LLM.generate (the original's path) adds when it tokenizes a prompt; vLLM's chat
# endpoint adds no special token itself (add_special_tokens is false for chat requests).
RAW_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
)


@dataclass(frozen=True, kw_only=True)
class SelfRAGPrompts(AnswerPrompts):
    """The pieces every Self-RAG call is built from. Self-RAG has no answer prompt: its answer
    is the best-scored generation with the reflection tokens removed, so ``answer`` is empty."""

    instruction: Prompt
    prompt_no_input: Prompt
    paragraph: Prompt
    no_retrieval: Prompt


PAPER = SelfRAGPrompts(
    instruction=Prompt(
        "instruction",
        "{question}",
        _source(
            "retrieval_lm/run_short_form.py",
            "preprocess_input_data (no TASK_INST entry for open-domain QA: the question itself)",
        ),
    ),
    prompt_no_input=Prompt(
        "prompt_no_input",
        "### Instruction:\n{instruction}\n\n### Response:\n",
        _source("retrieval_lm/utils.py", 'PROMPT_DICT["prompt_no_input"]'),
    ),
    paragraph=Prompt(
        "paragraph",
        "[Retrieval]<paragraph>{title}\n{text}</paragraph>",
        _source("retrieval_lm/run_short_form.py", "call_model_rerank_w_scores_batch"),
    ),
    no_retrieval=Prompt(
        "no_retrieval",
        "[No Retrieval]",
        _source("retrieval_lm/run_short_form.py", "call_model_rerank_w_scores_batch"),
    ),
    answer={},
)
