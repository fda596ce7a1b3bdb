"""IRCoT prompts (Trivedi et al., 2023, "Interleaving Retrieval with Chain-of-Thought Reasoning
for Knowledge-Intensive Multi-Step Questions"), from the authors' code, StonyBrookNLP/ircot at
3c1820f (``COMMIT``).

The demonstrations are the chain-of-thought files the IRCoT reasoner and the IRCoT QA reader
read, ``prompts/<dataset>/gold_with_2_distractors_context_cot_qa_codex.txt`` (named by
``base_configs/ircot_qa_codex_<dataset>.jsonnet``: ``rc_context_type_ = "gold_with_n_distractors"``,
``distractor_count = "2"``, the config's default; the authors also tried 1 and 3 on dev data),
vendored byte for byte under ``prompts/original/StonyBrookNLP-ircot/`` (SOURCE.json: the original
paths and git blob ids) for HotpotQA, 2WikiMultihopQA and MuSiQue. Each demonstration is a
``# METADATA: {"qid": ...}`` line, then its paragraphs (the gold ones and two distractors) as
``Wikipedia Title: <title>\\n<paragraph>``, then ``Q: <question>`` and
``A: <chain of thought> So the answer is: <answer>.``
A run with ``demo_files="adaptive-rag"`` (Adaptive-RAG's route C by default) reads instead
starsuzi/Adaptive-RAG's own ``gold_with_1_distractors`` files, vendored under
``prompts/original/starsuzi-Adaptive-RAG/`` (``DEMO_FILES``; that folder's SOURCE.json).

Which demonstrations a run sends is the original's ``read_prompt``
(``commaqa/inference/prompt_reader.py``): the file's examples whose qid is in the run's prompt
set (``PROMPT_SETS``, copied from ``run.py`` ``dataset_to_prompt_set_to_qids``: three sets of 15
per dataset; the authors tune on set 1 and report the mean over the three), in the set's order,
each stripped, joined by a blank line pair (``"\\n\\n\\n"``). The length rules that may drop some
of them are in noterag.nodes.ircot.

The two prompt texts around them are the original's code, not a file:
- ``reason`` (``commaqa/inference/ircot.py``, ``StepByStepCOTGenParticipant.query``): the
  demonstrations, ``"\\n\\n\\n"``, the paragraphs collected so far, ``"\\n\\n"``, ``Q: <question>``,
  ``"\\n"``, ``A: <the chain of thought so far>`` (its sentences joined by spaces), the whole
  stripped (so the first call ends with ``A:``).
- ``answer`` (IRCoT QA's reader, ``commaqa/execution/llm_qa_model.py``,
  ``LLMQAModel.ask_question``): the demonstrations, ``"\\n"``, then ``"\\n\\n"`` + the paragraphs
  when there are any, then ``"\\n\\nQ: <question>\\nA:"``. Its ``{passages}`` slot is filled with
  that optional ``"\\n\\n"`` + paragraphs part, so the text is the original's byte for byte.
IRCoT answers multi-hop questions only: ``answer`` has ``multihop`` only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from noterag.base.errors import ConfigError
from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts import vendored

REPOSITORY = "StonyBrookNLP/ircot"
COMMIT = "3c1820f698eea5eeddb4fba3c56b64c961e063e4"
DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")
METADATA_PREFIX = "# METADATA: "

# run.py, dataset_to_prompt_set_to_qids (@ COMMIT): the demonstrations of each prompt set, in order.
PROMPT_SETS: dict[str, dict[int, tuple[str, ...]]] = {
    "hotpotqa": {
        1: (
            "5abb14bd5542992ccd8e7f07", "5ac2ada5554299657fa2900d", "5a758ea55542992db9473680",
            "5ae0185b55429942ec259c1b", "5a8ed9f355429917b4a5bddd", "5abfb3435542990832d3a1c1",
            "5ab92dba554299131ca422a2", "5a835abe5542996488c2e426", "5a89c14f5542993b751ca98a",
            "5a90620755429933b8a20508", "5a7bbc50554299042af8f7d0", "5a8f44ab5542992414482a25",
            "5add363c5542990dbb2f7dc8", "5a7fc53555429969796c1b55", "5a790e7855429970f5fffe3d",
        ),
        2: (
            "5a90620755429933b8a20508", "5a88f9d55542995153361218", "5a758ea55542992db9473680",
            "5a89c14f5542993b751ca98a", "5abfb3435542990832d3a1c1", "5a7bbc50554299042af8f7d0",
            "5a77acab5542992a6e59df76", "5a7fc53555429969796c1b55", "5a8f44ab5542992414482a25",
            "5a835abe5542996488c2e426", "5ac2ada5554299657fa2900d", "5a8ed9f355429917b4a5bddd",
            "5a754ab35542993748c89819", "5add363c5542990dbb2f7dc8", "5abb14bd5542992ccd8e7f07",
        ),
        3: (
            "5a89d58755429946c8d6e9d9", "5a758ea55542992db9473680", "5a7fc53555429969796c1b55",
            "5a7bbc50554299042af8f7d0", "5a77acab5542992a6e59df76", "5a90620755429933b8a20508",
            "5a89c14f5542993b751ca98a", "5ab92dba554299131ca422a2", "5a8f44ab5542992414482a25",
            "5ae0185b55429942ec259c1b", "5a835abe5542996488c2e426", "5a754ab35542993748c89819",
            "5ac2ada5554299657fa2900d", "5a790e7855429970f5fffe3d", "5adfad0c554299603e41835a",
        ),
    },
    "2wikimultihopqa": {
        1: (
            "228546780bdd11eba7f7acde48001122", "97954d9408b011ebbd84ac1f6bf848b6",
            "a5995da508ab11ebbd82ac1f6bf848b6", "1ceeab380baf11ebab90acde48001122",
            "35bf3490096d11ebbdafac1f6bf848b6", "f86b4a28091711ebbdaeac1f6bf848b6",
            "f44939100bda11eba7f7acde48001122", "e5150a5a0bda11eba7f7acde48001122",
            "c6805b2908a911ebbd80ac1f6bf848b6", "13cda43c09b311ebbdb0ac1f6bf848b6",
            "f1ccdfee094011ebbdaeac1f6bf848b6", "028eaef60bdb11eba7f7acde48001122",
            "8727d1280bdc11eba7f7acde48001122", "79a863dc0bdc11eba7f7acde48001122",
            "c6f63bfb089e11ebbd78ac1f6bf848b6",
        ),
        2: (
            "c6805b2908a911ebbd80ac1f6bf848b6", "5897ec7a086c11ebbd61ac1f6bf848b6",
            "028eaef60bdb11eba7f7acde48001122", "af8c6722088b11ebbd6fac1f6bf848b6",
            "1ceeab380baf11ebab90acde48001122", "5811079c0bdc11eba7f7acde48001122",
            "228546780bdd11eba7f7acde48001122", "e5150a5a0bda11eba7f7acde48001122",
            "f44939100bda11eba7f7acde48001122", "f1ccdfee094011ebbdaeac1f6bf848b6",
            "13cda43c09b311ebbdb0ac1f6bf848b6", "79a863dc0bdc11eba7f7acde48001122",
            "a5995da508ab11ebbd82ac1f6bf848b6", "cdbb82ec0baf11ebab90acde48001122",
            "c6f63bfb089e11ebbd78ac1f6bf848b6",
        ),
        3: (
            "028eaef60bdb11eba7f7acde48001122", "8727d1280bdc11eba7f7acde48001122",
            "79a863dc0bdc11eba7f7acde48001122", "4724c54e08e011ebbda1ac1f6bf848b6",
            "e5150a5a0bda11eba7f7acde48001122", "35bf3490096d11ebbdafac1f6bf848b6",
            "a5995da508ab11ebbd82ac1f6bf848b6", "228546780bdd11eba7f7acde48001122",
            "97954d9408b011ebbd84ac1f6bf848b6", "f44939100bda11eba7f7acde48001122",
            "1ceeab380baf11ebab90acde48001122", "f86b4a28091711ebbdaeac1f6bf848b6",
            "c6f63bfb089e11ebbd78ac1f6bf848b6", "af8c6722088b11ebbd6fac1f6bf848b6",
            "5897ec7a086c11ebbd61ac1f6bf848b6",
        ),
    },
    "musique": {
        1: (
            "2hop__804754_52230", "2hop__292995_8796", "2hop__496817_701819", "2hop__154225_727337",
            "2hop__642271_608104", "2hop__439265_539716", "2hop__195347_20661",
            "2hop__131516_53573", "2hop__427213_79175", "3hop1__443556_763924_573834",
            "2hop__782642_52667", "2hop__861128_15822", "4hop3__703974_789671_24078_24137",
            "3hop1__61746_67065_43617", "4hop3__463724_100414_35260_54090",
        ),
        2: (
            "2hop__292995_8796", "2hop__154225_727337", "2hop__642271_608104", "2hop__195347_20661",
            "3hop1__61746_67065_43617", "2hop__861128_15822", "3hop1__753524_742157_573834",
            "2hop__496817_701819", "4hop3__703974_789671_24078_24137",
            "3hop1__858730_386977_851569", "2hop__804754_52230", "2hop__782642_52667",
            "2hop__102217_58400", "2hop__387702_20661", "3hop1__443556_763924_573834",
        ),
        3: (
            "2hop__427213_79175", "3hop1__753524_742157_573834", "2hop__782642_52667",
            "2hop__496817_701819", "3hop1__443556_763924_573834",
            "4hop3__463724_100414_35260_54090", "2hop__292995_8796", "2hop__804754_52230",
            "3hop1__858730_386977_851569", "2hop__131516_53573", "2hop__387702_20661",
            "4hop3__703974_789671_24078_24137", "2hop__154225_727337", "3hop1__61746_67065_43617",
            "2hop__642271_608104",
        ),
    },
}  # fmt: skip


# The vendored demonstration files a run reads (the context setting ``demo_files``), each a
# folder under prompts/original/. "ircot": StonyBrookNLP/ircot's gold_with_2_distractors files.
# "adaptive-rag", Adaptive-RAG's route C: starsuzi/Adaptive-RAG's own gold_with_1_distractors
# files (its classifier was trained on the runs named "..._distractor_count__1"; that folder's
# SOURCE.json), whose distractors differ from IRCoT's files of the same name.
IRCOT_FILES = REPOSITORY
DEMO_FILES = {"ircot": IRCOT_FILES, "adaptive-rag": "starsuzi/Adaptive-RAG"}


def source(files: str = IRCOT_FILES) -> dict[str, object]:
    """SOURCE.json of the repository ``files`` whose demonstration files are vendored."""
    return vendored.source(files)


@cache
def examples(dataset: str, files: str = IRCOT_FILES) -> dict[str, str]:
    """The demonstrations of ``dataset``'s file by qid, each as ``read_prompt`` makes it: the
    lines after its ``# METADATA`` line, joined and stripped."""
    if dataset not in DATASETS:
        raise ConfigError(f"IRCoT has demonstrations for {', '.join(DATASETS)}, not {dataset!r}")
    # read_prompt: file.read().strip().split("\n"), each line given back its "\n"
    text = vendored.text(files, f"{dataset}.txt")
    found: dict[str, str] = {}
    # the lines before the first METADATA line belong to no example
    qid: str | None = None
    lines: list[str] = []
    for line in text.strip().split("\n"):
        if line.strip().startswith(METADATA_PREFIX):
            if qid is not None and lines:
                found[qid] = "".join(lines).strip()
            metadata = json.loads(line.strip().replace(METADATA_PREFIX, "", 1))
            qid, lines = str(metadata["qid"]), []
        else:
            lines.append(line + "\n")
    if qid is not None and lines:
        found[qid] = "".join(lines).strip()
    return found


def demonstrations(dataset: str, prompt_set: int, files: str = IRCOT_FILES) -> list[str]:
    """The demonstrations of ``prompt_set`` (1, 2 or 3) for ``dataset`` in the files
    ``files``, in the set's order, as the original's ``read_prompt`` selects them (before its
    length rule)."""
    by_qid = examples(dataset, files)
    try:
        qids = PROMPT_SETS[dataset][prompt_set]
    except KeyError:
        raise ConfigError(f"IRCoT's prompt sets are 1, 2 and 3, not {prompt_set!r}") from None
    return [by_qid[qid] for qid in qids if qid in by_qid]


@dataclass(frozen=True, kw_only=True)
class IRCoTPrompts(AnswerPrompts):
    """The CoT reasoner's prompt (one sentence per call); ``answer``: the IRCoT QA reader's."""

    reason: Prompt


_CODE = f"{REPOSITORY} @ {COMMIT[:7]}"

PAPER = IRCoTPrompts(
    reason=Prompt(
        "reason",
        "{demonstrations}\n\n\n{passages}\n\nQ: {question}\nA: {cot}",
        f"{_CODE}: commaqa/inference/ircot.py, StepByStepCOTGenParticipant.query (the prompt "
        "is stripped after it is filled)",
    ),
    answer={
        "multihop": Prompt(
            "answer_multihop",
            "{demonstrations}\n{passages}\n\nQ: {question}\nA:",
            f"{_CODE}: commaqa/execution/llm_qa_model.py, LLMQAModel.ask_question (passages: "
            '"\\n\\n" + the paragraphs, or nothing when there are none)',
        )
    },
)
