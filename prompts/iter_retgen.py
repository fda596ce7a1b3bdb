"""Iter-RetGen prompts (Shao et al., 2023, "Enhancing Retrieval-Augmented Large Language Models
with Iterative Retrieval-Generation Synergy"), Appendix B: the 3-shot chain-of-thought
demonstrations of each dataset (Tables 12, 16, 20, 24 and 32), word for word. The authors
publish no code; the paper is the source.

What the paper leaves to us, marked "ours" in the sources:
- Each printed demonstration starts with the placeholder ``{Knowledge}``, where the paragraphs
  retrieved for the demonstration's question stood ("We replace retrieved paragraphs with the
  placeholder {Knowledge} for brevity"). Those paragraphs are not published, so the
  demonstrations are sent without them (as the paper's CoT prompting sends these same
  demonstrations, without retrieval).
- The line breaks: the paper typesets each demonstration as lines ({Knowledge}, "Question: ...",
  "Let's think step by step.", the reasoning, "So the answer is ..."); we send them as lines,
  the demonstrations separated by a blank line.
- The run's own question follows in the same form, after this iteration's paragraphs (formatted
  by the profile, noterag.core.profiles: ``[i] Title: ...\\nText: ...``): ``{knowledge}``,
  ``Question: {question}``, ``Let's think step by step.``, and the model continues.
- Curly apostrophes are sent straight ("Let's", "Ballin'"); the printed slips stay ("Random
  House was form in 2001.", "Catholics prayers").
StrategyQA's table begins with an instruction line, kept before its demonstrations.

The same prompt serves every iteration (the first is CoT prompting with retrieval; Section
4.4), so ``answer`` holds it per task: ``multihop`` (the demonstrations of the dataset the run's
``demos`` names: HotpotQA, 2WikiMultiHopQA, MuSiQue, Bamboogle) and ``strategyqa``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt

_PAPER = "Iter-RetGen paper (Shao et al., 2023), Appendix B"
DATASETS = ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


@dataclass(frozen=True, kw_only=True)
class IterRetGenPrompts(AnswerPrompts):
    """``answer``: the generation prompt per task (every iteration's, the last one's included);
    ``demonstrations``: the paper's 3-shot demonstrations by dataset (``strategyqa`` too);
    ``answer_line``: the answer is read from the last generation's "So the answer is" line
    (the paper's chain of thought); False: the last generation is the answer as it is
    (FlashRAG's IterativePipeline, whose prompt asks for the answer alone)."""

    demonstrations: Mapping[str, Prompt]
    answer_line: bool = True


def _shot(question: str, reasoning: str, answer: str) -> tuple[str, str, str]:
    """One demonstration: its question, its reasoning and its answer."""
    return question, reasoning, answer


def _demonstrations(name: str, table: str, *shots: tuple[str, str, str]) -> Prompt:
    """The demonstrations of one table: (question, reasoning, answer) each."""
    text = "\n\n".join(
        f"Question: {question}\nLet's think step by step.\n{reasoning}\nSo the answer is {answer}"
        for question, reasoning, answer in shots
    )
    return Prompt(name, text, f"{_PAPER}, {table} (without the {{Knowledge}} placeholders)")


DEMONSTRATIONS = {
    "hotpotqa": _demonstrations(
        "demonstrations_hotpotqa",
        "Table 12 (HotPotQA)",
        _shot(
            "What is the name of this American musician, singer, actor, comedian, and songwriter, "
            "who worked with Modern Records and born in December 5, 1932?",
            "Artists who worked with Modern Records include Etta James, Joe Houston, Little "
            "Richard, Ike and Tina Turner and John Lee Hooker in the 1950s and 1960s. Of these "
            "Little Richard, born in December 5, 1932, was an American musician, singer, actor, "
            "comedian, and songwriter.",
            "Little Richard",
        ),
        _shot(
            "Between Chinua Achebe and Rachel Carson, who had more diverse jobs?",
            "Chinua Achebe was a Nigerian novelist, poet, professor, and critic. Rachel Carson was "
            "an American marine biologist, author, and conservationist. So Chinua Achebe had 4 "
            "jobs, while Rachel Carson had 3 jobs. Chinua Achebe had more diverse jobs than Rachel "
            "Carson.",
            "Chinua Achebe",
        ),
        _shot(
            "Remember Me Ballin' is a CD single by Indo G that features an American rapper born in "
            "what year?",
            "Remember Me Ballin' is the CD single by Indo G featuring Gangsta Boo. Gangsta Boo is "
            "Lola Mitchell's stage name, who was born in August 7, 1979, and is an American "
            "rapper.",
            "1979",
        ),
    ),
    "2wikimultihopqa": _demonstrations(
        "demonstrations_2wikimultihopqa",
        "Table 16 (2WikiMultiHopQA)",
        _shot(
            "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
            "Blind Shaft is a 2003 film, while The Mask Of Fu Manchu opened in New York on "
            "December 2, 1932. 2003 comes after 1932. Therefore, The Mask Of Fu Manchu came out "
            "earlier than Blind Shaft.",
            "The Mask Of Fu Manchu",
        ),
        _shot(
            "When did John V, Prince Of Anhalt-Zerbst's father die?",
            "John was the second son of Ernest I, Prince of Anhalt-Dessau. Ernest I, Prince of "
            "Anhalt-Dessau died on 12 June 1516.",
            "12 June 1516",
        ),
        _shot(
            "Which film has the director who was born later, El Extrano Viaje or Love In Pawn?",
            "The director of El Extrano Viaje is Fernando Fernan Gomez, who was born on 28 August "
            "1921. The director of Love In Pawn is Charles Saunders, who was born on 8 April 1904. "
            "28 August 1921 comes after 8 April 1904. Therefore, Fernando Fernan Gomez was born "
            "later than Charles Saunders.",
            "El Extrano Viaje",
        ),
    ),
    "musique": _demonstrations(
        "demonstrations_musique",
        "Table 20 (MuSiQue)",
        _shot(
            "In which year did the publisher of In Cold Blood form?",
            "In Cold Blood was first published in book form by Random House. Random House was "
            "form in 2001.",
            "2001",
        ),
        _shot(
            "Who was in charge of the city where The Killing of a Sacred Deer was filmed?",
            "The Killing of a Sacred Deer was filmed in Cincinnati. The present Mayor of "
            "Cincinnati is John Cranley. Therefore, John Cranley is in charge of the city.",
            "John Cranley",
        ),
        _shot(
            "Where on the Avalon Peninsula is the city that Signal Hill overlooks?",
            "Signal Hill is a hill which overlooks the city of St. John's. St. John's is located "
            "on the eastern tip of the Avalon Peninsula.",
            "eastern tip",
        ),
    ),
    "bamboogle": _demonstrations(
        "demonstrations_bamboogle",
        "Table 24 (Bamboogle)",
        _shot(
            "When did the first prime minister of the Russian Empire come into office?",
            "The first prime minister of the Russian Empire was Count Sergei Witte. Sergei Witte "
            "was appointed on 6 November 1905.",
            "1905-11-06 00:00:00",
        ),
        _shot(
            "The most populous city in Punjab is how large (area wise)?",
            "Ludhiana is the most populous and the largest city in the Indian state of Punjab. "
            "The city has an area of over 310 km².",
            "310 square kilometers",
        ),
        _shot(
            "What is the capital of the country where yoga originated?",
            "Suggested origins include pre-Vedic Eastern states of India. The current capital of "
            "India is New Delhi.",
            "New Delhi",
        ),
    ),
}

_STRATEGYQA = _demonstrations(
    "demonstrations_strategyqa",
    "Table 32 (StrategyQA)",
    _shot(
        "Is it common to see frost during some college commencements?",
        "College commencement ceremonies often happen during the months of December, May, and "
        "sometimes June. Frost isn't uncommon to see during the month of December, as it is the "
        "winter.",
        "Yes",
    ),
    _shot(
        "Could a llama birth twice during War in Vietnam (1945-46)?",
        "The War in Vietnam (1945-46) lasted around 6 months. The gestation period for a llama is "
        "11 months. If a llama birth twice, the minimum time needed is 2 times 11 months, which is "
        "22 months, longer than 6 months.",
        "No",
    ),
    _shot(
        "Would Richard Dawkins hypothetically refuse an offering of the Last rites?",
        "Richard Dawkins is known as an outspoken atheist, well known for his criticism of "
        "creationism and intelligent design. The Last rites, in Catholicism, are the last prayers "
        "and ministrations given to an individual of the faith, when possible, shortly before "
        "death. It is unlikely that an atheist would participate in Catholics prayers.",
        "Yes",
    ),
)
DEMONSTRATIONS["strategyqa"] = Prompt(
    _STRATEGYQA.name,
    "You are required to answer the following questions. The final answer to a question should "
    "always be either Yes or No, and NOTHING ELSE.\n\n" + _STRATEGYQA.text,
    f"{_PAPER}, Table 32 (StrategyQA; its instruction line, then the demonstrations without the "
    "{Knowledge} placeholders)",
)

# ours: the run's question in the demonstrations' form, after this iteration's paragraphs
_GENERATE = "{demonstrations}\n\n{knowledge}\nQuestion: {question}\nLet's think step by step.\n"
_GENERATE_SOURCE = (
    f"ours: the run's question in the form of the demonstrations of {_PAPER} (their "
    "{Knowledge} is this iteration's paragraphs)"
)

PAPER = IterRetGenPrompts(
    answer={
        "multihop": Prompt("generate_multihop", _GENERATE, _GENERATE_SOURCE),
        "strategyqa": Prompt("generate_strategyqa", _GENERATE, _GENERATE_SOURCE),
    },
    demonstrations=DEMONSTRATIONS,
)
