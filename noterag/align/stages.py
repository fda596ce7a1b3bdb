"""One training question through DNAlign's four stages (DeepNote Appendix D; the official
``src/gen_dpo_data.py``), with a generator and a judge model.

For a question q with gold answers:

1. k is drawn from 3..9 (the official ``random.randint(3, 9)``; "multiple top-k values to
   simulate diverse retrieval scenarios") and the top-k passages for q are retrieved, written
   in the official DeepNote format (``Title: …\\nText: … \\n\\n``);
2. ``rag`` — N answers with vanilla RAG's prompt (official ``base``), scored against the golds;
3. ``init_note`` — N initial notes (``init_note``), ranked by the judge (Table 17);
4. ``refine_query`` — N query refinements (``gen_new_query``) on the best initial note with an
   empty query log, ranked by the judge (Table 18);
5. ``accumulate`` — the top-k passages for ``(best query + "\\n" + q)[:500]`` (the official
   search string), then N accumulated notes (``refine_note``) on the best initial note, each
   judged against it with the verdict prompt (Table 13).

The N samples of a stage use the official (temperature, top_p) grid — {0.1, 0.5, 0.9} x {0.1,
0.5, 0.9}, temperature outermost, the first N of the nine, and random draws from it beyond nine
— and are requested concurrently, as the official code sends them to vLLM in one batch. The
judge samples at the official ``call_gpt`` settings, temperature 1.0 and top_p 0.9 (1,280
tokens), and the generator at most 1,024 tokens per reply; both caps are settings.

Departures from the official file, each a bug there: it runs the accumulation stage for a
batch of nine questions after the loop, judging every question's notes against the *last*
question's best note and calling its model with a wrong signature; here each question's
accumulation uses its own best note. Where the official code's random draws use one global
generator, here each question draws from its own (seeded by the run's seed and the question's
id), so a resumed or concurrent run draws the same k and the same pairs.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig

from noterag.align.scoring import (
    DATA_TYPES,
    ID_PREFIXES,
    STAGES,
    StageScore,
    candidates_list,
    pick_by_verdicts,
    rank_by_judge,
    score_rag,
)
from noterag.core.profiles import deepnote_passages
from noterag.core.step import NOSTREAM, reply_text, to_passage
from noterag.prompts.align import JUDGES
from noterag.prompts.align import STAGES as STAGE_PROMPTS

# gen_dpo_data.py: temperature_list x top_p_list, temperature outermost
TEMPERATURES = (0.1, 0.5, 0.9)
TOP_PS = (0.1, 0.5, 0.9)
GRID = tuple((t, p) for t in TEMPERATURES for p in TOP_PS)
# gen_dpo_data.py: params_dict = {"max_tokens": 1024}; utils.call_gpt(temperature=1, top_p=0.9)
# and gpt_gen's max_tokens=1280
GENERATOR_MAX_TOKENS = 1024
JUDGE_SAMPLING = {"temperature": 1.0, "top_p": 0.9}
JUDGE_MAX_TOKENS = 1280
K_RANGE = (3, 9)
# the official search string: (best query + "\n" + question)[:500]
QUERY_CHARS = 500


def sampling_grid(samples: int, rng: random.Random) -> list[tuple[float, float]]:
    """The (temperature, top_p) of each of ``samples`` replies: the first of the nine official
    settings, then random draws from them (``random.choices``) beyond nine."""
    if samples < 1:
        from noterag.base.errors import ConfigError

        raise ConfigError(f"samples must be at least 1, not {samples}")
    if samples <= len(GRID):
        return list(GRID[:samples])
    return list(GRID) + rng.choices(GRID, k=samples - len(GRID))


def question_rng(seed: int, question_id: str) -> random.Random:
    """The random draws of one question (k, the rag and accumulate picks): the same for the
    same seed and question whatever ran before it."""
    return random.Random(f"{seed}:{question_id}")


@dataclass
class Cost:
    """Model calls and tokens of one role (generator or judge)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, message: AIMessage) -> None:
        usage = getattr(message, "usage_metadata", None) or {}
        self.calls += 1
        self.prompt_tokens += usage.get("input_tokens", 0)
        self.completion_tokens += usage.get("output_tokens", 0)

    def as_dict(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass
class Builder:
    """What every question shares: the models, the retriever and the sampling settings."""

    generator: BaseChatModel
    judge: BaseChatModel
    retriever: BaseRetriever
    grid: Sequence[tuple[float, float]]
    seed: int = 66
    k_range: tuple[int, int] = K_RANGE
    max_tokens: int = GENERATOR_MAX_TOKENS
    judge_max_tokens: int = JUDGE_MAX_TOKENS

    async def build(self, example: Any) -> dict[str, Any]:
        """The question's record: its k and passages, each stage's prompt, scored candidates
        and outcome, and its costs. Model and retriever errors propagate."""
        run = _QuestionRun(self, example)
        return await run.run()


@dataclass
class _QuestionRun:
    builder: Builder
    example: Any
    generator_cost: Cost = field(default_factory=Cost)
    judge_cost: Cost = field(default_factory=Cost)
    fallbacks: Counter[str] = field(default_factory=Counter)

    async def run(self) -> dict[str, Any]:
        b, question = self.builder, self.example.question
        rng = question_rng(b.seed, self.example.id)
        k = rng.randint(*b.k_range)
        passages = await self._search(question, k)
        refs = deepnote_passages(passages)
        stages: dict[str, dict[str, Any]] = {}

        # D_Ans: vanilla RAG's answers, against the golds
        prompt = STAGE_PROMPTS["rag"].format(query=question, refs=refs)
        replies = await self._sample("rag", prompt)
        stages["rag"] = self._record(
            "rag", prompt, replies, score_rag(replies, list(self.example.golds), rng)
        )

        # D_Init: initial notes, one judge ranking
        prompt = STAGE_PROMPTS["init_note"].format(query=question, refs=refs)
        notes = await self._sample("init_note", prompt)
        judge_reply = await self._judge(
            "init_note",
            JUDGES["init_note"].format(query=question, refs=refs, notes=candidates_list(notes)),
        )
        score, best = rank_by_judge(notes, judge_reply, "judge_init_note")
        stages["init_note"] = self._record("init_note", prompt, notes, score, judge=judge_reply)
        best_note = notes[best]

        # D_QR: new questions on the best initial note, one judge ranking
        query_log = str([])  # the official p_template(..., {"query_log": []})
        prompt = STAGE_PROMPTS["refine_query"].format(
            query=question, note=best_note, query_log=query_log
        )
        queries = await self._sample("refine_query", prompt)
        judge_reply = await self._judge(
            "refine_query",
            JUDGES["refine_query"].format(
                notes=best_note,
                query=question,
                query_log=query_log,
                new_querys=candidates_list(queries),
            ),
        )
        score, best = rank_by_judge(queries, judge_reply, "judge_refine_query")
        stages["refine_query"] = self._record(
            "refine_query", prompt, queries, score, judge=judge_reply
        )
        search = (queries[best] + "\n" + question)[:QUERY_CHARS]

        # D_KA: notes accumulated from the best query's passages, one verdict each
        new_passages = await self._search(search, k)
        prompt = STAGE_PROMPTS["accumulate"].format(
            query=question, refs=deepnote_passages(new_passages), note=best_note
        )
        updated = await self._sample("accumulate", prompt)
        verdicts = await asyncio.gather(
            *(
                self._judge(
                    "accumulate",
                    JUDGES["accumulate"].format(query=question, best_note=best_note, new_note=note),
                )
                for note in updated
            )
        )
        score = pick_by_verdicts(updated, verdicts, rng, "judge_accumulate")
        stages["accumulate"] = self._record(
            "accumulate", prompt, updated, score, verdicts=list(verdicts)
        )
        return {
            "k": k,
            "passage_ids": [p["id"] for p in passages],
            "search": search,
            "search_passage_ids": [p["id"] for p in new_passages],
            "stages": {name: stages[name] for name in STAGES},
            "pairs": sum(1 for s in stages.values() if s["outcome"] == "pair"),
            "generator": self.generator_cost.as_dict(),
            "judge": self.judge_cost.as_dict(),
            "fallbacks": dict(self.fallbacks),
        }

    async def _search(self, query: str, k: int) -> list[Any]:
        retriever = self.builder.retriever
        docs = await asyncio.to_thread(retriever.invoke, query, k=k)
        return [to_passage(d) for d in docs[:k]]

    async def _sample(self, stage: str, prompt: str) -> list[str]:
        b = self.builder

        async def one(temperature: float, top_p: float) -> str:
            message = await b.generator.ainvoke(
                prompt,
                config=_config(stage),
                temperature=temperature,
                top_p=top_p,
                max_tokens=b.max_tokens,
            )
            self.generator_cost.add(message)
            return reply_text(message)

        return list(await asyncio.gather(*(one(t, p) for t, p in b.grid)))

    async def _judge(self, stage: str, prompt: str) -> str:
        message = await self.builder.judge.ainvoke(
            prompt,
            config=_config(f"judge_{stage}"),
            temperature=JUDGE_SAMPLING["temperature"],
            top_p=JUDGE_SAMPLING["top_p"],
            max_tokens=self.builder.judge_max_tokens,
        )
        self.judge_cost.add(message)
        return reply_text(message)

    def _record(
        self,
        stage: str,
        prompt: str,
        replies: Sequence[str],
        score: StageScore,
        *,
        judge: str | None = None,
        verdicts: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        self.fallbacks.update(score.fallbacks)
        candidates = []
        for i, (reply, (temperature, top_p)) in enumerate(zip(replies, self.builder.grid)):
            candidate: dict[str, Any] = {
                "index": i,
                "response": reply,
                "temperature": temperature,
                "top_p": top_p,
                "score": score.scores[i],
            }
            if verdicts is not None:
                candidate["judge"] = verdicts[i]
            candidates.append(candidate)
        record: dict[str, Any] = {
            "stage": stage,
            "data_type": DATA_TYPES[stage],
            "prompt": prompt,
            "outcome": score.outcome,
            "chosen": score.chosen,
            "rejected": score.rejected,
            "candidates": candidates,
        }
        if judge is not None:
            record["judge"] = judge
        return record


def _config(stage: str) -> RunnableConfig:
    # noterag_stage names the call as the graphs' steps do (scripted test models key on it)
    return {"run_name": stage, "tags": [NOSTREAM], "metadata": {"noterag_stage": stage}}


def pair_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The preference pairs of one finished question's record, as pairs.jsonl lines: TRL's
    preference format (``prompt``, ``chosen``, ``rejected``: the prompt text and the two
    replies) plus the official ``id`` (``<prefix>-<question id>``) and ``data_type``, our
    ``stage``, the ``question_id`` and question, and the scored candidates."""
    pairs = []
    for name in STAGES:
        stage = (row.get("stages") or {}).get(name)
        if not stage or stage["outcome"] != "pair":
            continue
        candidates = stage["candidates"]
        pairs.append(
            {
                "id": f"{ID_PREFIXES[name]}-{row['id']}",
                "prompt": stage["prompt"],
                "chosen": candidates[stage["chosen"]]["response"],
                "rejected": candidates[stage["rejected"]]["response"],
                "stage": name,
                "data_type": stage["data_type"],
                "question_id": row["id"],
                "question": row["question"],
                "candidates": candidates,
            }
        )
    return pairs
