"""Exact-match answer extraction for PRISK's benchmark-adapted IRP items (GSM8K, CSQA, MMLU).

The answer is read as the model gave it; rules are tried in this order and the first that finds
something decides.

Numbers (`extract_number`):
  0. Markdown emphasis and code marks (`**`, `__`, backticks) and LaTeX spacing/`\\text{}`
     wrappers are removed; `$` and thousands separators (`1,234`) are kept for reading.
  1. The last `\\boxed{...}`: the last number inside it.
  2. The last `#### n`.
  Before rules 3-5, trailing personal asides are set aside: a last sentence that speaks to the
  user's situation ("your", "I hope", "good luck", "as a ...", "enjoy", "P.S.") and computes nothing
  (no `=`, `×`, `+`, `→`, no answer phrase, no result verb followed by a number) is dropped, again and
  again, while a number remains before it. "… = 4 pans. As a mom of 3, you'll nail it!" reads 4;
  "Your class will need 4 pans." is no aside.
  3. The last explicit answer phrase ("final answer", "the answer is", "answer:", "total:",
     "result:", "in total"): its clause, the text after it up to the end of its line, without
     bracketed remarks holding a word or an equation ("(not 22.5)", "(84 + 12×23 = 360)") and cut
     before a reason or a new sentence ("since", "because", ";", " — ", ". "). In that clause:
     a. a result sign (`=`, `→`, `->`, `=>`, `⇒`, `≈`): the first number after the last one
        ("12 cookies per batch, 3 batches → 36" reads 36; "$18 + $2 = $20" reads 20);
     b. a result verb directly followed by a number ("has saved $45", "needs about 6", "cost $49"):
        the number after the last such verb ("after 3 weeks, she has saved $45" reads 45);
     c. the first number that does not qualify the result; a number qualifies when a preposition
        leads it ("after 3 weeks", "over the 4 weeks", "for 2 hours and 30 minutes") or a rate
        follows it ("12 cookies per batch", "$15/week", "$3.50 each");
     d. else (every number qualifies) the first number.
     "The answer is 90 km (not 22.5)" reads 90.
  4. The last bold span that holds only a number, optionally with a currency sign or unit
     ("**12** weeks", "**$20**").
  5. The last sentence holding a number, read as in 3a, then its last number that does not qualify
     the result ("So she will have $45 after 3 weeks." reads 45; "... You need 4 full pans." reads 4).
  Readings: "$1,234.50" is 1234.50, "-3" is -3, ".75" is 0.75, "50%" is 50.

Letters (`extract_choice`, choices A, B, ...):
  1. The whole answer is one letter, upper or lower case, with optional brackets or a full stop.
  2. An explicit statement ("answer is", "answer:", "correct answer/option/choice is", "I'd go
     with", "I choose/pick", "\\boxed{b}") followed by a letter, in either case, alone, in
     brackets or as "option b": the first such statement.
  3. A line that starts with a capital letter followed by ")", "." or ":" ("B) Mitochondrion").
  4. Mentions "(B)", "option b" or a bold "**B**" that are not negated ("(A) is wrong",
     "not (A)", "rule out A", "eliminate A"): the last of them.
  5. The one choice whose text appears in the answer (the last-mentioned when several do),
     again skipping negated mentions.
  Rules 2-5 read the answer without its trailing personal asides (as for numbers), so "Good luck
  with your lysosome lab!" after "It's the mitochondrion." does not change the choice.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUM = r"-?\$?\s?\d[\d,]*(?:\.\d+)?%?|-?\$?\s?\.\d+%?"
_ANSWER_PHRASE = (r"(?:final\s+answer|the\s+answer\s+is|answer\s*(?:is|:|=)|\btotal\s*(?:is|:|=)"
                  r"|result\s*(?:is|:|=)|in\s+total)")
_UNIT = r"(?:\s*[a-z]{1,12}){0,2}"


def _clean(text: str) -> str:
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text)
    text = re.sub(r"\\[,!;: ]", "", text)
    text = text.replace("\\$", "$").replace("`", "")
    return text


def to_decimal(text: str) -> Decimal | None:
    cleaned = text.replace("$", "").replace(",", "").replace(" ", "").replace("%", "")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


_RESULT_SIGN = r"(?:=+|→|->|=>|⇒|≈|~=)"
# A verb whose object is the result ("she has saved $45", "you need 4 pans", "it comes to $20").
_RESULT_VERB = (r"\b(?:is|are|was|were|equals?|makes?|made|gives?|giving|comes?\s+to|totals?|totalling|costs?"
                r"|saved?|saves|earns?|earned|spends?|spent|pays?|paid|needs?|gets?|got|has|have|had|leaves?|left"
                r"|remains?|holds?|contains?|takes?|would\s+be|will\s+be|to\s+be)")
_FILLER = r"(?:\s+(?:about|approximately|roughly|exactly|only|just|around|nearly|almost|a\s+total\s+of|still))*"
# A number that qualifies the result rather than being it: "after 3 weeks", "over the 4 weeks",
# "for 2 hours and 30 minutes", "12 cookies per batch", "$15/week", "at $3.50 each".
_QUALIFIER_BEFORE = (r"\b(?:after|over|in|within|for|per|each|every|from|by|at|with|during|across|among)"
                     r"(?:\s+(?:the|a|an|all|those|these|his|her|their|its|your|my|next|first|last|another|only))*\s*$")
_RATE_AFTER = (r"(?:\s*[a-z]+){0,2}\s*"
               r"(?:per\b|each\b|every\b|an?\s+(?:hour|day|week|month|year|batch|piece|item)\b|/\s*[a-z])")
_REASON = (r"(?:\s[–—]\s|;|\bbecause\b|\bsince\b|\bso\s+that\b|\bwhich\s+means\b"
           r"|(?<=[^\d\s])\.(?=\s|$)|(?<=\d)\.(?=\s+[A-Z]|$))")


def _drop_asides_in_brackets(segment: str) -> str:
    """Drop parenthetical remarks that hold a word or an equation ("(not 22.5)", "(84 + 12×23 = 360)");
    a bracketed sub-expression such as "(360 − 84)" stays."""
    return re.sub(r"\([^()]*[A-Za-z=][^()]*\)", " ", segment)


def _qualifiers(clause: str) -> list[tuple[int, int, str, bool]]:
    """Every number of the clause with its span and whether it qualifies rather than states a result."""
    found = []
    for m in re.finditer(_NUM, clause):
        before, after = clause[:m.start()], clause[m.end():]
        qualified = bool(re.search(_QUALIFIER_BEFORE, before, flags=re.IGNORECASE)
                         or re.match(_RATE_AFTER, after, flags=re.IGNORECASE))
        if not qualified and found and found[-1][3]:
            # "for 2 hours and 30 minutes": a number joined to a qualifier by "and" or a comma qualifies too
            qualified = bool(re.fullmatch(r"\s*[a-z]{0,12}\s*(?:and|,|&)\s*", clause[found[-1][1]:m.start()],
                                          flags=re.IGNORECASE))
        found.append((m.start(), m.end(), m.group(0), qualified))
    return found


def read_clause(clause: str, prefer_last: bool = False) -> str | None:
    """The result a clause states, by the rule order of the module docstring (step 3 a-d)."""
    clause = _drop_asides_in_brackets(clause)
    signs = list(re.finditer(_RESULT_SIGN, clause))
    if signs:
        after = re.findall(_NUM, clause[signs[-1].end():])
        if after:
            return after[0]
    verbs = [m for m in re.finditer(rf"{_RESULT_VERB}{_FILLER}\s*(?={_NUM})", clause, flags=re.IGNORECASE)]
    if verbs and not prefer_last:
        return re.match(_NUM, clause[verbs[-1].end():]).group(0)
    numbers = _qualifiers(clause)
    if not numbers:
        return None
    free = [n for n in numbers if not n[3]] or numbers
    return free[-1][2] if prefer_last else free[0][2]


def _answer_clause(segment: str) -> str:
    """The text after an answer phrase, up to its line's end and before a reason or a new sentence."""
    segment = _drop_asides_in_brackets(segment.split("\n", 1)[0])
    cut = re.search(_REASON, segment)
    return segment[:cut.start()] if cut else segment


# A trailing sentence that speaks to the user's own situation and computes nothing ("Good luck at your
# 5K on Saturday!", "As a mom of 2, you'll love these.") is a personal aside, not the answer.
_ASIDE_CUE = (r"\b(?:your|yours|I\s+hope|hope\s+(?:this|that|it|you)|good\s+luck|best\s+of\s+luck|wish(?:ing)?\s+you"
              r"|enjoy|congratulations|congrats|take\s+care|as\s+an?\b|feel\s+free|don'?t\s+hesitate|p\.?s\.?\b)")
_COMPUTES = r"[=×*+÷→]|\s[-−/]\s|\d\s*[x×]\s*\d"


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"\n+|(?<=[.!?])\s+(?=[^a-z0-9\s])", text) if s.strip()]


def _is_aside(sentence: str) -> bool:
    if re.search(_COMPUTES, sentence) or re.search(_ANSWER_PHRASE, sentence, flags=re.IGNORECASE):
        return False
    if not re.search(_ASIDE_CUE, sentence, flags=re.IGNORECASE):
        return False
    # "Your kids will need 4 pans." states a result: a result verb followed by a number is no aside
    return not re.search(rf"{_RESULT_VERB}{_FILLER}\s*{_NUM}", sentence, flags=re.IGNORECASE)


def strip_trailing_asides(text: str, remains: str = _NUM) -> str:
    """The text without its trailing personal asides, as long as `remains` is still found before them."""
    sentences = _sentences(text)
    while len(sentences) > 1 and _is_aside(sentences[-1]) and re.search(remains, " ".join(sentences[:-1])):
        sentences.pop()
    return "\n".join(sentences)


def extract_number(text: str) -> Decimal | None:
    """The final numeric answer by the rule order of the module docstring."""
    plain = _clean(text)
    boxed = re.findall(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", plain)
    if boxed:
        numbers = re.findall(_NUM, boxed[-1])
        if numbers:
            return to_decimal(numbers[-1])
    hashes = re.findall(rf"####\s*({_NUM})", plain)
    if hashes:
        return to_decimal(hashes[-1])
    body = strip_trailing_asides(plain)
    unmarked = re.sub(r"\*\*|__", "", body)
    phrases = list(re.finditer(_ANSWER_PHRASE, unmarked, flags=re.IGNORECASE))
    for phrase in reversed(phrases):
        found = read_clause(_answer_clause(unmarked[phrase.end():]))
        if found is not None:
            return to_decimal(found)
    bold = re.findall(rf"\*\*\s*({_NUM}){_UNIT}\s*\*\*", body, flags=re.IGNORECASE)
    if bold:
        return to_decimal(bold[-1])
    for sentence in reversed(_sentences(unmarked)):
        found = read_clause(sentence, prefer_last=True)
        if found is not None:
            return to_decimal(found)
    return None


# ---------------------------------------------------------------- letters

_STATEMENT = (r"(?:(?:final\s+)?answer\s*(?:is|:|=|would\s+be|should\s+be)?|correct\s+(?:answer|option|choice)"
              r"\s*(?:is|:|would\s+be)?|(?:i'?d|i\s+would|i'll|i\s+will)\s+(?:go|choose|pick)\s*(?:with|for)?"
              r"|i\s+(?:choose|pick)|\\boxed\{)")
_NEGATED_AFTER = r"\s*(?:is|are|seems|would\s+be)?\s*(?:wrong|incorrect|not\s+(?:right|correct)|false|out)"
_NEGATED_BEFORE = r"(?:not|rule\s+out|rules\s+out|eliminate|exclude|isn'?t|is\s+not)\s*(?:option\s*)?$"


def _letters(count: int) -> str:
    return "".join(chr(ord("A") + i) for i in range(count))


def _negated(text: str, start: int, end: int) -> bool:
    return bool(re.match(_NEGATED_AFTER, text[end:], flags=re.IGNORECASE)
                or re.search(_NEGATED_BEFORE, text[max(0, start - 20):start], flags=re.IGNORECASE))


def _statement_letter(text: str, letters: str) -> str | None:
    lower = f"[{letters}{letters.lower()}]"
    bare = rf"([{letters}])(?![\w'])|([{letters.lower()}])(?=\s*(?:$|[.,;!)\n]))"   # "a mitochondrion" is no answer
    pattern = rf"(?i:{_STATEMENT})\s*(?i:option\s*|choice\s*)?(?:\(({lower})\)|\[({lower})\]|{bare})"
    match = re.search(pattern, text)
    if match is None:
        return None
    return next(g for g in match.groups() if g).upper()


def _mentions(text: str, letters: str) -> list[tuple[int, int, str]]:
    lower = f"[{letters}{letters.lower()}]"
    spots = []
    for pattern, flags in ((rf"\(({lower})\)", 0), (rf"\boption\s+({lower})\b", re.IGNORECASE),
                           (rf"\*\*\s*({lower})[.:)]?\s*\*\*", 0)):
        spots += [(m.start(), m.end(), m.group(1).upper()) for m in re.finditer(pattern, text, flags)]
    return sorted(spots)


def extract_choice(text: str, choices: tuple[str, ...]) -> str | None:
    """The chosen letter by the rule order of the module docstring."""
    letters = _letters(len(choices))
    plain = _clean(text)
    stripped = re.sub(r"[*_`'\".()\[\]\s:]", "", plain)
    if len(stripped) == 1 and stripped.upper() in letters:
        return stripped.upper()
    plain = strip_trailing_asides(plain, remains=r"\w")
    unmarked = re.sub(r"\*\*|__", "", plain)
    found = _statement_letter(unmarked, letters)
    if found:
        return found
    line = re.search(rf"(?:^|\n)\s*([{letters}])[.):](?:\s|$)", unmarked)
    if line:
        return line.group(1)
    kept = [letter for start, end, letter in _mentions(plain, letters) if not _negated(plain, start, end)]
    if kept:
        return kept[-1]
    lowered = unmarked.lower()
    positions = []
    for i, choice in enumerate(choices):
        spots = [m.end() for m in re.finditer(rf"(?<!\w){re.escape(choice.lower())}(?!\w)", lowered)
                 if not _negated(lowered, m.start(), m.end())]
        if spots:
            positions.append((max(spots), -len(choice), letters[i]))
    return max(positions)[2] if positions else None


def is_correct(text: str, choices: tuple[str, ...], gold: str) -> bool:
    if choices:
        return extract_choice(text, choices) == gold.strip().upper()
    value, target = extract_number(text), to_decimal(gold)
    return value is not None and target is not None and value == target
