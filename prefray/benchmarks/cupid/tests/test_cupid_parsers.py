"""CUPID answer parsers: the judge's score, the inferred preference, the checklist and the matcher."""

from __future__ import annotations

import pytest

from prefray.benchmarks.cupid.scoring import match_schema, parse_checklist, parse_match, parse_preference, parse_score
from prefray.engine.benchmark import ParseError


# -- the judge's score ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, score", [
    ("8.5", 8.5), ("7/10", 7.0), ("**8**", 8.0), ("Score: 9", 9.0), ("Score: 8.5/10", 8.5),
    ("**7**/10", 7.0), ("Score: **7**/10", 7.0), ("7 out of 10", 7.0), ("Score - 6", 6.0),
    ('{"analysis": "ok", "score": 6.5}', 6.5), ('```json\n{"analysis": "a", "score": "4"}\n```', 4.0),
    ('{"analysis": "a", "score": 1e1}', 10.0),  # JSON's own number syntax: 1e1 is ten
    ("### Evaluation Label\n\nGood\n\n### Evaluation Score\n\n7", 7.0),
    ("Item 2 is met. Overall I'd give it 6/10.", 6.0),
])
def test_parse_score(text, score):
    assert parse_score(text) == {"score": score}


# Answers written the way judges write them, each with the score a reader takes from it.
REALISTIC = [
    ("The answer opens with the safety note before each step, as asked (item 1 met). It is not short: "
     "the notes run to a paragraph each (item 2 missed).\n\n### Evaluation Score\n\n5", 5.0),
    ("**Analysis**\n- Checklist 1: met.\n- Checklist 2: met.\n- Checklist 3: partly met; the table lacks a "
     "total row.\n\n**Score:** 8", 8.0),
    ("Item 1: yes. Item 2: no, the jargon stays unexplained. Item 3: no analogy is given.\n\nFinal score: 3/10", 3.0),
    ('{"analysis": "Both checklist items are met; the deadline buffer is explicit for every milestone.", '
     '"score": 10}', 10.0),
    ("Overall the response satisfies the preference very well. Score: 9.5", 9.5),
    ("The response ignores the request for a single most important fix; it lists twelve issues in no "
     "order.\nScore: 2 (very poor)", 2.0),
    ("Score: 7\n\nReasoning: the plan fits the 20-minute limit but two exercises need dumbbells.", 7.0),
    ("Checklist item 1 (budget in a table) - met; item 2 (total row) - met; item 3 (no figures in "
     "paragraphs) - missed.\nI would rate this response **6** out of 10.", 6.0),
    ("I rate it 4/10 for item coverage. After re-reading, the tone also misses: Score = 3", 3.0),
    ("```json\n{\n  \"analysis\": \"Item 1 met, item 2 met, item 3 met.\",\n  \"score\": 9\n}\n```", 9.0),
    ("### Evaluation\nThe answer is acceptable but generic.\n### Evaluation Score\n**5**", 5.0),
    ("Score:\n\n8", 8.0),
    ("All three items are handled with care; I give it a score of 8.", 8.0),
    ("The score is 6. Item 2 is only half met.", 6.0),
]


@pytest.mark.parametrize("text, score", REALISTIC)
def test_parse_score_on_realistic_judge_answers(text, score):
    assert parse_score(text) == {"score": score}


@pytest.mark.parametrize("text", [
    "", "The answer is fine.", "### Evaluation Score\n\nexcellent", "Score: 11", "0",
    "Score: -3",                       # a sign is read: -3 is out of range, never 3
    "Score: −2",                       # the Unicode minus too
    "Score: 1e1", "1e1",               # exponent notation is refused, never read as 1
    "Score: 0/10",
    "Score: 3-4", "Score: 6 to 7", "Somewhere around 7-8/10",  # a range is not one score
    "Score: <a number from 1 to 10>",  # a template echo holds no score
    '{"analysis": "a", "score": -4}', '{"analysis": "a", "score": "12"}',
])
def test_parse_score_refuses(text):
    with pytest.raises(ParseError):
        parse_score(text)


# -- the inferred preference ------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "Analysis: they asked for lists twice.\n<preference>Use numbered steps.</preference>",
    "<preference>\n  Use   numbered\n steps.\n</preference>",                   # whitespace collapsed
    "<PREFERENCE>Use numbered steps.</PREFERENCE>",
    "Draft: <preference>Use bullets.</preference>\nOn reflection:\n<preference>Use numbered steps.</preference>",
    "Reasoning…\n<preference>Use numbered steps.",                               # closing tag forgotten
    "Reasoning here.\nPreference: Use numbered steps.",
    "**Preference:** Use numbered steps.",
    "### Analysis\nblah\n\n### Most Likely Preference\n\nUse numbered steps.",    # the reference's format
    "- Preference - \"Use numbered steps.\"",
    "They want lists. Preference: something else. Preference: Use numbered steps.",  # inline: the last label
    "Preference: <the preference in one sentence>\n<preference>Use numbered steps.</preference>",
])
def test_parse_preference_variants(text):
    assert parse_preference(text) == {"preference": "Use numbered steps."}


@pytest.mark.parametrize("text", [
    "I think they like lists.", "Preference:", "### Most Likely Preference\n\n", "",
    "Preference: <the preference in one sentence>",             # template echoes
    "<preference><the preference in one sentence></preference>",
    "<preference>[your preference here]</preference>",
    "### Most Likely Preference\n\n<Describe the user's most likely preference>",
    "<preference>...</preference>", "<preference></preference>",
])
def test_parse_preference_refuses_missing_or_echoed_sections(text):
    with pytest.raises(ParseError):
        parse_preference(text)


def test_template_echo_is_named_in_the_error():
    with pytest.raises(ParseError, match="repeats the template"):
        parse_preference("Preference: <the preference in one sentence>")


# -- checklist and matcher --------------------------------------------------------------------------
def test_checklist_and_match_parsers():
    five = '{"analysis": "five", "checklist": ["a?", " ", "b?", "c?", "d?", "e?"]}'  # blanks dropped, cut to 4
    assert parse_checklist(five) == {"checklist": ["a?", "b?", "c?", "d?"]}
    assert parse_checklist('{"checklist": []}') == {"checklist": []}
    # the reference's answer form: an analysis in prose, then the JSON
    assert parse_checklist('**Analysis**\nTwo aspects.\n**Checklist**\n```json\n{"checklist": ["a?", "b?"]}\n```') == {
        "checklist": ["a?", "b?"]}
    answer = '{"results": [{"coverage": "Fully Covered"}, {"label": "partially"}, {"coverage": "not covered"}]}'
    assert parse_match(answer) == {"scores": [1.0, 0.5, 0.0]}
    for bad in ("no json", '{"results": [{"coverage": "mostly"}]}'):
        with pytest.raises(ParseError):
            parse_match(bad)
    with pytest.raises(ParseError):
        parse_checklist('{"checklist": "x"}')


def test_match_schema_fixes_the_number_of_ratings():
    for n in (1, 3, 5):
        results = match_schema(n)["properties"]["results"]
        assert (results["minItems"], results["maxItems"]) == (n, n)


# -- a verdict is not a score named as what another answer would get, nor a tag mention a section ----
@pytest.mark.parametrize("text, score", [
    ("### Evaluation Score\n\n7\n\nA score of 10 would need tables for every item.", 7.0),
    ("Score: 7\n\nA score of 10 would require a table for the totals.", 7.0),
    ("**Score:** 6/10\nTo reach a score of 9, the answer needs a summary line.", 6.0),
    ("Analysis: a score of 3 would fit an answer that ignored the tables.\n\nFinal score: 8", 8.0),
    ("Score (1-10): 7", 7.0),                                   # the scale in brackets is not a range
    ("Item 1 met, item 2 met.\n\n**Score**\n8/10\n\nA 10/10 requires the optional extras too.", 8.0),
    ("This gets 7/10; a 10/10 would need the table.", 7.0),
    ("It is a solid answer, though a higher score of 9 needs item 3. I give it a score of 7.", 7.0),
    ("The final score is **7**. A perfect score of 10 is reserved for answers that add a table.", 7.0),
    ("### Evaluation Score\n7 - a score of 10 would need tables.", 7.0),
])
def test_parse_score_reads_the_verdict_not_a_hypothetical(text, score):
    assert parse_score(text) == {"score": score}


@pytest.mark.parametrize("text", [
    "A score of 10 would need tables; I give it a 7.",         # only a hypothetical score is labelled
    "A score of 4 fits item 1; a score of 8 fits item 2.",      # prose that names two scores
])
def test_parse_score_refuses_hypotheticals_and_disagreeing_prose(text):
    with pytest.raises(ParseError):
        parse_score(text)


@pytest.mark.parametrize("text", [
    "I will put it in <preference> tags.\n<preference>Use tables.</preference>",
    "…in <preference> tags.\n<preference>Use tables.</preference>",
    "<preference>Use tables.</preference>\nI put it in <preference> tags as asked.",
    "Between <preference></preference> tags:\n<preference>Use tables.</preference>",
    "Answer in <preference> tags. <preference>Use tables.",          # a mention, then an unclosed section
    "<preference>Use tables.<preference>",                           # the closing tag mistyped
    "<preference>Use tables.</ preference>",
    "The format is <preference>...</preference>.\n<preference>Use tables.</preference>",
    "<preference>Use tables.</preference>\n\nNote: the <preference> above comes from session 3.",
])
def test_parse_preference_ignores_mentions_of_the_tag(text):
    assert parse_preference(text) == {"preference": "Use tables."}


# -- round 4: a tag named in prose never opens a section; an overall score beats per-item scores ------
# Each answer is written the way a model writes it; the expected parse is what a reader takes from it.
PREFERENCE_SHAPES = [
    # the tag named as a noun ("the <preference> tag", "<preference> tags", "`<preference>`"): a mention
    ("I won't use the <preference> tag because it is unclear.", None),
    ("The sessions disagree, so I won't wrap anything in <preference> tags; the user's wishes here are unclear.",
     None),
    ("I'll give my answer in the <preference> tag below.\n\nPreference: Use tables for budgets.",
     "Use tables for budgets."),
    ("Per the instructions, the `<preference>` block comes last.\n\n**Preference:** Keep replies under 100 words.",
     "Keep replies under 100 words."),
    ('Writing it inside a "<preference>" element as asked:\n<preference>Cite the source of every figure.',
     "Cite the source of every figure."),
    # the tag inside a sentence, not where a section begins: a mention
    ("Normally I would use <preference> here, but no session shares this context.", None),
    ("Since I cannot decide between the two, leaving <preference> empty is safest.\n"
     "### Most Likely Preference\n\nAsk before assuming a deadline.", "Ask before assuming a deadline."),
    # a section that opens a line, follows a colon or ends a sentence still counts, closed or not
    ("Reasoning: in sessions 2 and 5 the user asked for short bullet lists when traveling.\n\n"
     "<preference>\nUse short bullet lists when the user is traveling.",
     "Use short bullet lists when the user is traveling."),
    ("My answer: <preference>Explain each acronym on first use.", "Explain each acronym on first use."),
    ("The user rejected long intros twice. <preference>Start with the answer, no preamble.",
     "Start with the answer, no preamble."),
    ("I will answer in the <preference> tag. <preference>Give metric units first.</preference> "
     "That is all.", "Give metric units first."),
    ("<preference>Offer two options and a recommendation.</preference>\n\n"
     "(I used the <preference> tag as instructed; the rest is my reasoning.)",
     "Offer two options and a recommendation."),
]


@pytest.mark.parametrize("text, preference", PREFERENCE_SHAPES)
def test_a_tag_named_in_prose_never_opens_the_preference(text, preference):
    if preference is None:
        with pytest.raises(ParseError):
            parse_preference(text)
    else:
        assert parse_preference(text) == {"preference": preference}


SCORE_SHAPES = [
    # an overall verdict wins over per-item scores, before or after it
    ("Overall score: 7\n\nItem 1 score: 9 (tables used throughout).\nItem 2 score: 4 (no summary line).", 7.0),
    ("Overall score: 7 … item 2 score: 4", 7.0),
    ("Item 1 score: 9\nItem 2 score: 4\nItem 3 score: 6\n\nOverall score: 6", 6.0),
    ("**Final score: 5**\n\n- Checklist item 1 — score: 8\n- Checklist item 2 — score: 2", 5.0),
    ("Score: 8\n\nBreakdown:\n- Criterion 1 score: 9\n- Criterion 2 score: 6", 8.0),
    ("| Item | Score |\n|---|---|\n| Item 1 | 8/10 |\n| Item 2 | 5/10 |\n| Overall | 6/10 |", 6.0),
    ("Overall: 7/10. Item 1: 9/10 (met), item 2: 4/10 (missed).", 7.0),
    ("Total score: 6\nAspect 'tone' score: 3", 6.0),
    ("Overall rating: 8\nItem 2 rating: 5", 8.0),
    ("The response meets both checklist items.\n\nOverall: 9", 9.0),
    ("Item 1: met. Item 2: partly met.\nRating: 6/10", 6.0),
    ("Overall score: 7, item 2 score: 4", 7.0),
    ("### Item 1 score\n8\n\n### Overall score\n6", 6.0),
    ("1. Tables used: 9/10\n2. Summary line: 4/10\nOverall score: 6/10", 6.0),
    ("Score: 7. For item 2, score: 4.", 7.0),
    ("Item 1 is met (score: 8). Overall I'd give it 7/10.", 7.0),
    # a clause that only mentions items is no item's score
    ("All items met, so the score is 9.", 9.0),
    ("Criterion A score: 4\nScore: 7", 7.0),
    # per-item scores alone name no overall score: refused, never one item's score
    ("Item 1 score: 8\nItem 2 score: 6", None),
    ("Checklist item 1 score: 10. Checklist item 2 score: 3.", None),
]


@pytest.mark.parametrize("text, score", SCORE_SHAPES)
def test_an_overall_score_wins_over_per_item_scores(text, score):
    if score is None:
        with pytest.raises(ParseError):
            parse_score(text)
    else:
        assert parse_score(text) == {"score": score}
