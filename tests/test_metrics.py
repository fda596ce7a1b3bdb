"""Answer metrics (noterag.eval.metrics) on hand-worked cases and the papers' own examples.

The columns named as in the papers (em, f1, acc, str_em, str_hit) must give what the official
``src/eval.py`` of thunlp/DeepNote and thunlp/Adaptive-Note gives; acc_norm / acc_strict are
ours. Expected numbers are worked by hand from the official functions' definitions (quoted in
the tests), not recomputed by a copy of them."""

from __future__ import annotations

import pytest

from noterag.eval import aggregate, score
from noterag.eval.metrics import (
    EXTRA_METRICS,
    PAPER_METRICS,
    acc_choice,
    acc_norm,
    acc_score,
    acc_strict,
    exact_match,
    f1,
    normalize_answer,
    yes_no,
)

# --------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Picture of Dorian Gray", "picture of dorian gray"),
        ("  An apple a   day! ", "apple day"),
        ("5,042", "5042"),
        ('"Peshwa" (Prime Minister)', "peshwa prime minister"),
        # Articles go only as whole words: "Theatre" and "another" keep their letters.
        ("Theatre another", "theatre another"),
        ("", ""),
    ],
)
def test_normalize_answer_follows_squad(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


# --------------------------------------------------------------------------- the papers' cases

ZERO = {"em": 0.0, "f1": 0.0, "acc": 0.0, "acc_norm": 0.0, "f1_flashrag": 0.0}


def test_adaptive_note_case_study_5042() -> None:
    """Adaptive-Note Table A5: gold "5,042"; its answer is right, Vanilla RAG's "366" is not."""
    gold = ["5,042"]
    assert score("5,042", gold, "multihop") == {
        "em": 100.0,
        "f1": 100.0,
        "acc": 100.0,
        "acc_norm": 100.0,
        "f1_flashrag": 100.0,
    }
    assert score("366", gold, "multihop") == ZERO
    chain_of_note = "The answer is not available in the passages provided."
    assert score(chain_of_note, gold, "multihop") == ZERO


def test_a_sentence_containing_the_gold_gets_acc_but_not_em() -> None:
    # The case study's best note, used as an answer: 18 normalised tokens, one of them "5042",
    # so F1 = 2·(1/18)·1 / (1/18 + 1) = 2/19.
    note = (
        "Based on the retrieved documents, the 2010 population of the town where Lake George "
        "Avenue Historic District is located is 5,042."
    )
    result = score(note, ["5,042"], "multihop")
    assert result["em"] == 0.0
    assert result["acc"] == result["acc_norm"] == 100.0  # "5,042" is there verbatim
    assert result["f1"] == pytest.approx(100 * 2 / 19)


def test_deepnote_case_study_stettin() -> None:
    """DeepNote Table 19: "Stettin (also known as Szczecin in Polish)" for gold "Stettin".

    Counted correct by acc; EM 0; F1: 1 shared token of 7 predicted → 2·(1/7)·1/(1/7+1) = 1/4.
    """
    result = score("Stettin (also known as Szczecin in Polish)", ["Stettin"], "multihop")
    assert result == {
        "em": 0.0,
        "f1": pytest.approx(25.0),
        "acc": 100.0,
        "acc_norm": 100.0,
        "f1_flashrag": pytest.approx(25.0),
    }


def test_deepnote_case_study_clatskanie_and_the_react_answer() -> None:
    """DeepNote Table 20: DeepNote answers "Clatskanie" (right); ReAct "Raymond Carver" (wrong)."""
    assert score("Clatskanie", ["Clatskanie"], "multihop")["em"] == 100.0
    assert score("Raymond Carver", ["Clatskanie"], "multihop") == ZERO


def test_deepnote_bad_case_dundee_united() -> None:
    """DeepNote Table 21 (bad case): "Dundee United" for gold "Celtic" scores nothing."""
    assert score("Dundee United", ["Celtic"], "multihop") == ZERO


# --------------------------------------------------------------------------- EM / F1 / acc


def test_em_ignores_case_articles_and_punctuation() -> None:
    assert exact_match("the picture of Dorian Gray.", "The Picture of Dorian Gray") == 1.0
    assert exact_match("Picture of Dorian Gray's", "The Picture of Dorian Gray") == 0.0


def test_token_f1_partial_overlap() -> None:
    # Gold "Andrew Lloyd Webber and Tim Rice" (6 tokens) vs 3 correct tokens: P=1, R=1/2.
    assert f1("Andrew Lloyd Webber", "Andrew Lloyd Webber and Tim Rice") == pytest.approx(2 / 3)
    # Repeated tokens count once per occurrence in the gold (multiset overlap).
    assert f1("paris paris", "paris") == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_every_metric_takes_the_best_alias() -> None:
    # MuSiQue question 2hop__335418_279684 has six aliases; the prediction matches the fourth.
    golds = ["Pittsburgh Pirates", "Orioles", "Pirates", "Baltimore Orioles", "New York Mets"]
    result = score("the Baltimore Orioles", golds, "multihop")
    assert result == {
        "em": 100.0,
        "f1": 100.0,
        "acc": 100.0,
        "acc_norm": 100.0,
        "f1_flashrag": 100.0,
    }
    # F1 takes the best alias too: 2 of 3 tokens against "New York Mets" beats 0 elsewhere.
    assert score("New York", golds, "multihop")["f1"] == pytest.approx(100 * 0.8)


def test_acc_with_several_aliases_needs_only_one_contained() -> None:
    # No alias equals the answer (EM 0); "Orioles" is inside it raw, so acc is 100. Only
    # "O's" is inside it once normalised ("os"), which acc_norm sees and acc does not.
    golds = ["Baltimore Orioles", "Orioles"]
    assert score("the Orioles of 1966", golds, "multihop")["acc"] == 100.0
    assert score("the Orioles of 1966", golds, "multihop")["em"] == 0.0
    assert acc_score("Os win", ["Baltimore Orioles", "O's"]) == 0.0
    assert acc_norm("Os win", ["Baltimore Orioles", "O's"]) == 1.0


# ------------------------------------------------------------- acc: official vs normalised


def test_us_navy_is_not_contained_raw_but_is_once_normalised() -> None:
    # Official acc_score: "us navy" in "the u.s. navy" → False. SQuAD normalisation turns the
    # prediction into "us navy", which equals the gold: EM and F1 are 100, acc_norm too.
    assert score("The U.S. Navy", ["US Navy"], "multihop") == {
        "em": 100.0,
        "f1": 100.0,
        "acc": 0.0,
        "acc_norm": 100.0,
        "f1_flashrag": 100.0,
    }


def test_acc_is_raw_containment_ignoring_case() -> None:
    # "paris" in "paris, france" → True; EM 0; F1 1 of 2 tokens: P=1/2, R=1 → 2/3.
    assert score("Paris, France", ["paris"], "multihop") == {
        "em": 0.0,
        "f1": pytest.approx(100 * 2 / 3),
        "acc": 100.0,
        "acc_norm": 100.0,
        "f1_flashrag": pytest.approx(100 * 2 / 3),
    }


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("Picture of Dorian Gray", "The Picture of Dorian Gray"),  # the article
        ("population: 5042", "5,042"),  # the comma
        ("Szczecin (Stettin),", "Szczecin, Stettin"),  # punctuation between the words
    ],
)
def test_contained_only_after_normalisation(prediction: str, gold: str) -> None:
    assert acc_score(prediction, [gold]) == 0.0
    assert acc_norm(prediction, [gold]) == 1.0
    result = score(prediction, [gold], "multihop")
    assert (result["acc"], result["acc_norm"]) == (0.0, 100.0)


def test_acc_is_a_substring_test_as_in_the_papers() -> None:
    # A gold "no" is inside "not", raw and normalised alike; EM does not fall for it.
    assert score("It is not known", ["no"], "multihop") == {
        "em": 0.0,
        "f1": 0.0,
        "acc": 100.0,
        "acc_norm": 100.0,
        "f1_flashrag": 0.0,
    }


def test_the_empty_gold_guard_is_on_acc_norm_only() -> None:
    # Official acc_score has no guard: "" is a substring of everything.
    assert acc_score("a long answer", [""]) == 1.0
    # acc_norm demands equality for a gold that normalises to nothing ("The" → "").
    assert acc_norm("a long answer", [""]) == 0.0
    assert acc_norm("a long answer", ["The"]) == 0.0
    assert acc_norm("", ["The"]) == 1.0
    # Raw, "The" is not empty: acc_score looks for "the".
    assert acc_score("a long answer", ["The"]) == 0.0
    assert acc_score("the answer", ["The"]) == 1.0


def test_f1_of_two_empty_sides_is_zero_as_in_the_official_code() -> None:
    # Official f1_score: no shared token → 0, even for two empty token lists; compute_exact
    # compares the normalised strings, "" == "" → 1.
    assert score("", ["The"], "multihop") == {
        "em": 100.0,
        "f1": 0.0,
        "acc": 0.0,  # "the" in "" → False
        "acc_norm": 100.0,  # the guard: "" equals ""
        "f1_flashrag": 0.0,
    }


@pytest.mark.parametrize("prediction", ["", "   ", None])
def test_empty_prediction_scores_zero(prediction: str | None) -> None:
    assert score(prediction, ["Rush"], "multihop") == ZERO


def test_yes_no_question_in_a_multihop_set() -> None:
    # HotpotQA comparison questions have gold "yes"/"no" and stay multihop.
    assert score("Yes.", ["yes"], "multihop") == {
        "em": 100.0,
        "f1": 100.0,
        "acc": 100.0,
        "acc_norm": 100.0,
        "f1_flashrag": 100.0,
    }
    assert score("no", ["yes"], "multihop") == ZERO


def test_a_bare_string_is_one_alias() -> None:
    assert score("Rush", "Rush", "multihop")["em"] == 100.0


def test_multihop_reproduces_the_official_numbers_on_a_small_run() -> None:
    """Five questions, the official per-run numbers worked by hand (DeepNote prints
    ``round(100 * mean, 2)`` for Acc, F1 and EM):

    ============================  =====================  ===  ====  ===  ========
    prediction                    golds                  acc  F1    EM   acc_norm
    ============================  =====================  ===  ====  ===  ========
    The U.S. Navy                 US Navy                0    1     1    1
    Paris, France                 paris                  1    2/3   0    1
    It was 5042 people.           5,042                  0    2/5   0    1
    Orioles                       Baltimore Orioles,     1    1     1    1
                                  Orioles
    I don't know                  Celtic                 0    0     0    0
    ============================  =====================  ===  ====  ===  ========

    F1 of row 3: 1 shared token of 4 ("it was 5042 people") → P=1/4, R=1 → 2/5.
    Acc = 2/5 = 40.0, EM = 2/5 = 40.0, F1 = (1 + 2/3 + 2/5 + 1 + 0)/5 = 46/75 → 61.33.
    """
    run = [
        ("The U.S. Navy", ["US Navy"]),
        ("Paris, France", ["paris"]),
        ("It was 5042 people.", ["5,042"]),
        ("Orioles", ["Baltimore Orioles", "Orioles"]),
        ("I don't know", ["Celtic"]),
    ]
    means = aggregate(score(p, g, "multihop") for p, g in run)
    assert list(means) == ["em", "f1", "acc", "acc_norm", "f1_flashrag"]  # the papers' first
    assert round(means["acc"], 2) == 40.0
    assert round(means["em"], 2) == 40.0
    assert round(means["f1"], 2) == 61.33
    assert means["f1"] == pytest.approx(100 * 46 / 75)
    assert means["acc_norm"] == 80.0


# --------------------------------------------------------------------------- ASQA


# An ambiguous question in ALCE's qa_pairs/short_answers shape (invented, like the test corpus):
# "Who designed the Velmora bridge?" — the original bridge, and the rebuilt one (two aliases).
ASQA_GOLDS = [["Tomas Ilk"], ["Ada Reyes", "Adelaide Reyes"]]


def test_asqa_all_pairs_answered() -> None:
    prediction = "Tomas Ilk designed the 1931 bridge; Ada Reyes designed its 1958 replacement."
    assert score(prediction, ASQA_GOLDS, "asqa") == {"str_em": 100.0, "str_hit": 100.0}


def test_asqa_half_the_pairs_answered() -> None:
    assert score("Tomas Ilk.", ASQA_GOLDS, "asqa") == {"str_em": 50.0, "str_hit": 0.0}


def test_asqa_alias_and_normalisation() -> None:
    # The second alias of pair 2 matches; case and punctuation do not matter.
    prediction = "TOMAS ILK, then ADELAIDE REYES!"
    assert score(prediction, ASQA_GOLDS, "asqa") == {"str_em": 100.0, "str_hit": 100.0}


def test_asqa_nothing_answered_and_a_pair_without_short_answers() -> None:
    assert score("", ASQA_GOLDS, "asqa") == {"str_em": 0.0, "str_hit": 0.0}
    # ALCE counts a QA pair with no short answers as never answered.
    assert score("Tomas Ilk", [["Tomas Ilk"], []], "asqa") == {"str_em": 50.0, "str_hit": 0.0}


def test_asqa_three_pairs_gives_thirds() -> None:
    golds = [["a1"], ["b2"], ["c3"]]
    assert score("a1 and b2", golds, "asqa")["str_em"] == pytest.approx(200 / 3)


def test_asqa_short_answer_that_normalises_to_nothing_answers_its_pair() -> None:
    # Official exact_presence: normalize_answer("The") == "" and "" in anything → True.
    assert score("nothing relevant", [["The"], ["Tomas Ilk"]], "asqa") == {
        "str_em": 50.0,
        "str_hit": 0.0,
    }


def test_asqa_drops_the_end_of_turn_token_like_the_official_eval_asqa() -> None:
    # Both official eval_asqa functions apply output.replace("<|im_end|>", "") first; left in,
    # it would normalise to "tomasimend ilk", which does not hold "tomas ilk".
    assert score("Tomas<|im_end|> Ilk", [["Tomas Ilk"]], "asqa")["str_em"] == 100.0


# --------------------------------------------------------------------------- StrategyQA


@pytest.mark.parametrize(
    ("prediction", "gold", "acc", "strict"),
    [
        ("Yes", "yes", 100.0, 100.0),
        ("yes.", "yes", 100.0, 100.0),
        ("YES", "yes", 100.0, 100.0),
        ("No, because Albany, GA has around 75,000 people.", "no", 100.0, 100.0),
        ("yes—the larger one", "yes", 100.0, 100.0),  # an em dash is a word boundary
        ("No", "yes", 0.0, 0.0),
        # Both words: the official \bgold\b finds the gold whichever it is; strict says wrong.
        ("yes or no", "yes", 100.0, 0.0),
        ("yes and no", "no", 100.0, 0.0),
        ("Yes/No", "no", 100.0, 0.0),
        # The gold inside another word is not the word: "not", "know", "nobody", "yesterday".
        ("Maybe", "no", 0.0, 0.0),
        ("I don't know", "no", 0.0, 0.0),
        ("Not really", "no", 0.0, 0.0),
        ("Nobody", "no", 0.0, 0.0),
        ("Yesterday it was", "yes", 0.0, 0.0),
        ("", "no", 0.0, 0.0),
    ],
)
def test_strategyqa_accuracy(prediction: str, gold: str, acc: float, strict: float) -> None:
    assert score(prediction, [gold], "strategyqa") == {"acc": acc, "acc_strict": strict}


def test_yes_or_no_is_right_for_the_papers_and_wrong_for_strict() -> None:
    # DeepNote's acc_choice: re.search(r"\byes\b", "yes or no") matches → correct.
    assert acc_choice("yes or no", ["yes"]) == 1.0
    assert acc_strict("yes or no", ["yes"]) == 0.0
    assert score("yes or no", ["yes"], "strategyqa") == {"acc": 100.0, "acc_strict": 0.0}


def test_acc_choice_matches_a_gold_with_regex_characters_literally() -> None:
    # Not a StrategyQA gold (score insists on yes/no): the official pattern rf"\b{ans}\b"
    # leaves the gold unescaped, so "." would match any character; we escape it.
    assert acc_choice("it is 3.5 or so", ["3.5"]) == 1.0
    assert acc_choice("it is 3x5 or so", ["3.5"]) == 0.0  # unescaped, "." would match "x"


def test_strategyqa_reproduces_the_official_number_on_a_small_run() -> None:
    """DeepNote's acc_choice over five replies, by hand: "Yes." (yes) ✓, "yes or no" (no) ✓,
    "No, it is not." (no) ✓, "Not really" (no) ✗, "I cannot say yes" (yes) ✓ → 4/5 = 80.0.
    acc_strict: the second has both words → 3/5 = 60.0."""
    run = [
        ("Yes.", "yes"),
        ("yes or no", "no"),
        ("No, it is not.", "no"),
        ("Not really", "no"),
        ("I cannot say yes", "yes"),
    ]
    means = aggregate(score(p, [g], "strategyqa") for p, g in run)
    assert means == {"acc": 80.0, "acc_strict": 60.0}
    assert list(means) == ["acc", "acc_strict"]


def test_yes_no_reads_a_single_answer_word() -> None:
    assert yes_no("Yes, it is") == "yes"
    assert yes_no("no.") == "no"
    assert yes_no("yes? no?") is None
    assert yes_no("unclear") is None


@pytest.mark.parametrize("task", ["multihop", "asqa", "strategyqa"])
def test_score_yields_the_papers_columns_then_ours(task: str) -> None:
    golds = [["Tomas Ilk"]] if task == "asqa" else ["yes"]
    assert tuple(score("yes", golds, task)) == PAPER_METRICS[task] + EXTRA_METRICS[task]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("golds", "task"),
    [
        ([], "multihop"),
        ([1994], "multihop"),
        (["Tomas Ilk", "Ada Reyes"], "asqa"),  # flat aliases, not QA pairs
        ([], "asqa"),
        (["maybe"], "strategyqa"),
        (["yes", "no"], "strategyqa"),
        (["Rush"], "trivia"),
    ],
)
def test_golds_of_the_wrong_shape_raise(golds: list, task: str) -> None:
    with pytest.raises(ValueError):
        score("anything", golds, task)


# --------------------------------------------------------------------------- aggregate


def test_aggregate_means_per_metric() -> None:
    rows = [{"em": 100.0, "f1": 50.0}, {"em": 0.0, "f1": 100.0}, {"em": 50.0, "f1": 0.0}]
    assert aggregate(rows) == {"em": pytest.approx(50.0), "f1": pytest.approx(50.0)}


def test_aggregate_averages_each_metric_over_the_rows_that_have_it() -> None:
    rows = [{"em": 100.0, "acc": 100.0}, {"acc": 0.0}, {"str_em": 50.0}]
    assert aggregate(rows) == {"em": 100.0, "acc": 50.0, "str_em": 50.0}


def test_aggregate_of_nothing_is_empty() -> None:
    assert aggregate([]) == {}


def test_scores_are_percentages() -> None:
    rows = [score(p, ["Chief of Protocol"], "multihop") for p in ("Chief of Protocol", "Chief")]
    assert aggregate(rows) == {
        "em": 50.0,
        "f1": pytest.approx((100 + 100 * 2 * 1 * (1 / 3) / (1 + 1 / 3)) / 2),
        "acc": 50.0,  # "chief of protocol" is not in "chief"
        "acc_norm": 50.0,
        "f1_flashrag": pytest.approx((100 + 100 * 2 * 1 * (1 / 3) / (1 + 1 / 3)) / 2),
    }


def test_reports_list_the_papers_columns_before_ours() -> None:
    from noterag.eval.report import metric_means
    from noterag.eval.runs import metric_label

    rows = [
        {"metrics": score("The U.S. Navy", ["US Navy"], "multihop")},
        {"metrics": score("yes or no", ["no"], "strategyqa")},
    ]
    means = metric_means(rows)
    assert list(means) == ["em", "f1", "acc", "acc_norm", "acc_strict", "f1_flashrag"]
    # acc is the papers' column for both tasks: (0 + 100) / 2.
    assert means["acc"] == 50.0 and means["acc_norm"] == 100.0 and means["acc_strict"] == 0.0
    assert [metric_label(m) for m in means] == [
        "EM", "F1", "Acc", "Acc (norm.)", "Acc (strict)", "F1 (FlashRAG)",
    ]  # fmt: skip
