"""Exact-match answer extraction for PRISK's benchmark-adapted IRP items (GSM8K, CSQA, MMLU).

The answer is read as the model gave it. An answer that cannot be read with confidence is
**unparsed** (`None`), never guessed: a range ("between 12 and 15", "4-5 pans"), two candidates
("either 4 or 5", "B or maybe C", "Answer: B/C") or an answer that only rejects options ("Not A.")
reads `None`, and the accuracy counts it wrong (`is_correct` is False) and reports it
(`IRP_unparsed`, irp.py). Rules are tried in order; the first rule that finds an answer decides,
and a rule that finds a hedged answer decides "unparsed" (later rules are not asked).

Reading a number (`numbers`): `$1,234.50` is 1234.50, `-3` and `−3` are -3 (a minus after a digit
or `)` is a subtraction), `.75` is 0.75, `3/4` is 0.75, `1 1/2` is 1.5, `\\frac{1}{4}` is 0.25,
`50%` is 50, `$3.2 million` is 3,200,000, number words ("twelve", "twenty-four"; not "one") are
numbers; digits inside a word ("3f2a") are not.

Numbers (`extract_number`):
  0. Markdown emphasis and code marks and LaTeX spacing/`\\text{}` wrappers are removed.
  1. The last `\\boxed{...}`: after its last `=`, its last number.
  2. The last `#### n`.
  Before rules 3-5, trailing personal asides are set aside: a last sentence that speaks to the
  user's situation ("your", "I hope", "good luck", "as a ...", "enjoy", "P.S.", "Note:", "Tip:",
  "Fun fact") and computes nothing (no `=`, `×`, `+`, `→`, no answer phrase, no result verb followed
  by a number) is dropped, again and again, while a number remains before it.
  3. The last explicit answer phrase ("final answer", "the answer is", "answer:", "total:",
     "result:", "in total"; "90 km in total" reads the number just before "in total"): its clause,
     the text after it up to the end of its line, cut before a reason or a new sentence ("since",
     "because", ";", " — ", ". "). A hedge in the clause (a range,
     "N or M" unless M is a rate ("90 km, or 22.5 km a week"), "(or M if ...)", "could be M")
     makes the answer unparsed. Else, without bracketed
     remarks holding a word or an equation ("(not 22.5)"):
     a. a result sign (`=`, `→`, `->`, `=>`, `⇒`, `≈`): the first number after the last one;
     b. a result verb directly followed by a number ("has saved $45", "needs about 6"): the number
        after the last such verb;
     c. the first number that does not qualify the result; a number qualifies when a preposition
        leads it ("after 3 weeks", "over the 4 weeks") or a rate follows it ("12 cookies per batch",
        "$15/week", "$3.50 each");
     d. else (every number qualifies) the first number.
  4. The last bold span that holds only a number, optionally with a currency sign or unit.
  5. The final statement: the text split into sentences and clauses (";", " — "); trailing
     afterthoughts are dropped first: a clause with "on average", "an average", "for comparison",
     "at that rate", "by the way", or one with "left over", "to spare", "spare", "extra", "left"
     that follows a clause stating a result (a result sign, a result verb with a number, or
     "so"/"therefore"), is a side quantity ("…, so 12 boxes; that leaves 2 spare" reads 12). The
     last clause holding a number is read as in 3a, then its last number that does not qualify the
     result; a hedge in it or a last sentence starting "Or 67.5 ..." makes the answer unparsed.

Letters (`extract_choice`, choices A, B, ...): every mention of an option is collected, by letter
("(B)", "option b", "**B**", a bare capital "B"; "A" followed by a lower-case word is the article)
or by its text (case-insensitive, plural forms, the first word of a phrase inflected ("leaves the
building"), a leading article dropped, the longest option first so "unit elastic" is not also
"elastic"). Each mention is
  - rejected when a negation or a dismissal leads it ("not", any "n't", "rule out", "unlike",
    "instead of", "tempting to say", "might think", "first thought was", "many students answer",
    "people pick", "at first glance", a comparison's foil "followed by", "compared with", "than",
    within two words) or follows it ("is wrong", "can't be",
    "looks right, but", "– no", "is the antiderivative, not ..."); a mention joined to a rejected
    one by "or"/"and"/"," is rejected too ("isn't C or D"); in "X …, but Y …" X is rejected;
  - an explicit statement ("answer is", "answer:", "correct answer/choice is", "best choice is",
    "I'd go with", "I choose", `\\boxed{b}`), followed by a letter in either case;
  - strong when a conclusion leads it ("so", "therefore", "it's", "must be", "check", "yes", a
    colon when the mention ends its sentence: "is the right one: C.") or follows it ("is correct",
    "is the ...", "fits", "does.", "– yes", ✅);
  - else neutral.
  1. The whole answer is one letter (optional brackets or a full stop): that letter.
  Trailing personal asides are set aside as for numbers. Then:
  2. Two options offered side by side ("B or C", "A or maybe D", "B/C", "X …, though Y is also
     arguable", "… could work too"), neither rejected: unparsed.
  3. The last statement whose letter is never rejected in the answer.
  4. The last strong mention whose letter is never rejected in the answer.
  5. The neutral mentions of letters never rejected: one letter → that letter; none or several →
     unparsed. A text that only rejects ("Not A.") is unparsed.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

# ---------------------------------------------------------------- reading numbers

_MAGNITUDE = {"thousand": Decimal(1000), "million": Decimal(10) ** 6, "billion": Decimal(10) ** 9, "k": Decimal(1000)}
_NUM = (r"(?<![\w.,/^])-?(?:[$€£]\s?)?(?:\d+\s\d+/\d+(?![\d/])|\d+/\d+(?![\d/])|\d{1,3}(?:,\d{3})+(?:\.\d+)?"
        r"|\d+(?:\.\d+)?|\.\d+)(?:\s?(?:million|billion|thousand)\b|k\b)?%?(?![A-Za-z]*\d)")
_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}


@dataclass(frozen=True)
class Num:
    """A number found in a text: its span, its text and its value."""
    start: int
    end: int
    text: str
    value: Decimal


def _value(token: str) -> Decimal | None:
    token = token.strip().replace("$", "").replace("€", "").replace("£", "").replace("%", "")
    scale = Decimal(1)
    for word, factor in _MAGNITUDE.items():
        if token.endswith(word):
            token, scale = token[: -len(word)].strip(), factor
    sign = -1 if token.startswith("-") else 1
    token = token.lstrip("-").replace(",", "").strip()
    try:
        whole, _, frac = token.rpartition(" ") if "/" in token else ("", "", token)
        if "/" in frac:
            top, bottom = frac.split("/")
            number = Decimal(whole or 0) + Decimal(top) / Decimal(bottom)
        else:
            number = Decimal(frac)
    except (InvalidOperation, ZeroDivisionError):
        return None
    return sign * number * scale


def numbers(text: str) -> list[Num]:
    """Every number of `text`; a minus right after a digit or `)` is a subtraction, not a sign."""
    found = []
    for m in re.finditer(_NUM, text):
        token = m.group(0)
        if token.startswith("-") and re.search(r"[\d)]\s*$", text[:m.start()]):
            token = token[1:]
        value = _value(token)
        if value is not None:
            found.append(Num(m.start(), m.end(), token, value))
    return found


def to_decimal(text: str) -> Decimal | None:
    return _value(str(text))


def _number_words(text: str) -> str:
    """Number words as digits ("twenty-four" → 24); "one" is left alone ("no one", "one of")."""
    def tens(m: re.Match) -> str:
        return str(_TENS[m.group(1).lower()] + (_WORDS[m.group(2).lower()] if m.group(2) else 0))
    text = re.sub(rf"\b({'|'.join(_TENS)})(?:[- ]({'|'.join(list(_WORDS)[1:10])}))?\b", tens, text, flags=re.I)
    names = "|".join(w for w in _WORDS if w not in ("one", "twenty"))
    return re.sub(rf"\b({names})\b", lambda m: str(_WORDS[m.group(1).lower()]), text, flags=re.IGNORECASE)


def _clean(text: str) -> str:
    text = re.sub(r"\\text(?:bf|rm)?\{([^}]*)\}", r"\1", text)
    text = re.sub(r"\\d?frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(r"\(\s*(\d+)\s*\)/\(\s*(\d+)\s*\)", r"\1/\2", text)
    text = text.replace("{,}", ",").replace("\\times", "×").replace("\\cdot", "×").replace("\\div", "÷")
    text = re.sub(r"\\[,!;: ]", " ", text)
    text = text.replace("\\$", "$").replace("`", "").replace("−", "-")
    return text


# ---------------------------------------------------------------- numbers

# "Total:" and "The total is" state the answer; "Weekly total:" or "Subtotal:" state a part of it
_ANSWER_PHRASE = (r"(?:final\s+answer|the\s+answer\s+is|answer\s*(?:is|:|=)"
                  r"|(?:(?<![A-Za-z] )(?<![A-Za-z])|\b(?:the|grand|final|overall)\s+)total\s*(?:is|:|=)"
                  r"|result\s*(?:is|:|=)|in\s+total)")
_UNIT = r"(?:\s*[a-z]{1,12}){0,2}"
_RESULT_SIGN = r"(?:=+|→|->|=>|⇒|≈|~=)"
# A verb whose object is the result ("she has saved $45", "you need 4 pans", "it comes to $20").
_RESULT_VERB = (r"\b(?:is|are|was|were|equals?|makes?|made|gives?|giving|comes?\s+to|totals?|totalling|costs?"
                r"|saved?|saves|earns?|earned|spends?|spent|pays?|paid|needs?|gets?|got|has|have|had|leaves?|left"
                r"|remains?|holds?|contains?|takes?|would\s+be|will\s+be|to\s+be)")
_FILLER = r"(?:\s+(?:about|approximately|roughly|exactly|only|just|around|nearly|almost|a\s+total\s+of|still))*"
# A number that qualifies the result rather than being it: "after 3 weeks", "over the 4 weeks",
# "for 2 hours and 30 minutes", "12 cookies per batch", "$15/week", "$3.50 each".
_QUALIFIER_BEFORE = (r"\b(?:after|over|in|within|for|per|each|every|from|by|with|during|across|among)"
                     r"(?:\s+(?:the|a|an|all|those|these|his|her|their|its|your|my|next|first|last|another|only))*\s*$")
_RATE_AFTER = (r"(?:\s*[a-z]+){0,2}\s*"
               r"(?:per\b|each\b|every\b|an?\s+(?:hour|day|week|month|year|batch|piece|item)\b|/\s*[a-z])")
_REASON = (r"(?:\s[–—]\s|;|\bbecause\b|\bsince\b|\bso\s+that\b|\bwhich\s+means\b"
           r"|(?<=[^\d\s])\.(?=\s|$)|(?<=\d)\.(?=\s+[A-Z]|$))")
_N = r"-?[$€£]?\s?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
# Two candidates or a range where one answer is expected.
_HEDGE = (rf"\bbetween\s+{_N}{_UNIT}\s+and\s+{_N}"
          rf"|(?<!from\s)(?<![\d.,]){_N}{_UNIT}\s*(?:–|—|\bto\b)\s*{_N}"
          rf"|(?<![\d.,-])\d+(?:\.\d+)?-\d+(?:\.\d+)?(?![\d/-])"
          rf"|{_N}{_UNIT},?\s+or\s+(?:maybe\s+|possibly\s+|perhaps\s+)?(?>{_N})(?!{_RATE_AFTER})"
          rf"|\(\s*or\s+{_N}|\b(?:could|might|may)\s+(?:also\s+)?be\s+{_N}|\beither\s+{_N}")


def _hedged(segment: str) -> bool:
    return bool(re.search(_HEDGE, segment, flags=re.IGNORECASE))


def _drop_asides_in_brackets(segment: str) -> str:
    """Drop parenthetical remarks that hold a word or an equation ("(not 22.5)", "(84 + 12×23 = 360)");
    a bracketed sub-expression such as "(360 − 84)" stays."""
    return re.sub(r"\([^()]*[A-Za-z=][^()]*\)", " ", segment)


def _qualifiers(clause: str) -> list[tuple[Num, bool]]:
    """Every number of the clause and whether it qualifies rather than states a result."""
    found: list[tuple[Num, bool]] = []
    for num in numbers(clause):
        before, after = clause[:num.start], clause[num.end:]
        qualified = bool(re.search(_QUALIFIER_BEFORE, before, flags=re.IGNORECASE)
                         or re.match(_RATE_AFTER, after, flags=re.IGNORECASE))
        if not qualified and found and found[-1][1]:
            # "for 2 hours and 30 minutes": a number joined to a qualifier by "and" or a comma qualifies too
            qualified = bool(re.fullmatch(r"\s*[a-z]{0,12}\s*(?:and|,|&)\s*", clause[found[-1][0].end:num.start],
                                          flags=re.IGNORECASE))
        found.append((num, qualified))
    return found


class Unsure(Exception):
    """The answer offers a range or two candidates: unparsed, whatever a later rule would read."""


def read_clause(clause: str, prefer_last: bool = False) -> Decimal | None:
    """The result a clause states, by the rule order of the module docstring (step 3 a-d)."""
    if _hedged(clause):
        raise Unsure
    clause = _drop_asides_in_brackets(clause)
    signs = list(re.finditer(_RESULT_SIGN, clause))
    if signs:
        after = numbers(clause[signs[-1].end():])
        if after:
            return after[0].value
    verbs = list(re.finditer(rf"{_RESULT_VERB}{_FILLER}\s*(?={_NUM})", clause, flags=re.IGNORECASE))
    if verbs and not prefer_last:
        return numbers(clause[verbs[-1].end():])[0].value
    found = _qualifiers(clause)
    if not found:
        return None
    free = [n for n, qualified in found if not qualified] or [n for n, _ in found]
    return free[-1].value if prefer_last else free[0].value


def _answer_clause(segment: str) -> str:
    """The text after an answer phrase, up to its line's end and before a reason or a new sentence."""
    line = segment.split("\n", 1)[0]
    cut = re.search(_REASON, _drop_asides_in_brackets(line))
    if cut is None:
        return line
    kept = _drop_asides_in_brackets(line)[:cut.start()]
    # keep the brackets of the kept part: a hedge such as "(or 13 if ...)" must stay visible
    bracket = re.match(r"\s*\([^()]*\)", line[len(kept.rstrip()):]) if kept else None
    return kept + (bracket.group(0) if bracket else "")


# A trailing sentence that speaks to the user's own situation and computes nothing ("Good luck at your
# 5K on Saturday!", "As a mom of 2, you'll love these.") is a personal aside, not the answer.
_ASIDE_CUE = (r"\b(?:your|yours|I\s+hope|hope|good\s+luck|best\s+of\s+luck|wish(?:ing)?\s+you"
              r"|enjoy|congratulations|congrats|take\s+care|as\s+an?\b|feel\s+free|don'?t\s+hesitate|p\.?s\.?\b"
              r"|note\s*:|tip\s*:|fun\s+fact|by\s+the\s+way|you'?re|you\s+(?:could|might|may)|remember\b)")
_COMPUTES = r"[=×*+÷→]|\s[-/]\s|\d\s*[x×]\s*\d"


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


# A side quantity after the result: "that leaves 2 spare" (after a clause that states a result), "that's an
# average of 22.5 km per week", "at that rate, 600 miles would cost $70" (after any clause with a number).
_REMAINDER = r"\b(?:left\s+over|leftover|to\s+spare|spare|extra|left)\b"
_SIDE_NOTE = r"\b(?:on\s+average|an\s+average|(?:for|in|by)\s+comparison|at\s+that\s+rate|by\s+the\s+way)\b"
_CONCLUSION = r"^\W*(?:so|therefore|thus|hence|in\s+total|altogether|that\s+means)\b|,\s*so\b"


def _states_result(clause: str) -> bool:
    return bool(re.search(_RESULT_SIGN, clause) or re.search(_CONCLUSION, clause, flags=re.IGNORECASE)
                or re.search(rf"{_RESULT_VERB}{_FILLER}\s*{_NUM}", clause, flags=re.IGNORECASE))


def _afterthought(clause: str, before: str) -> bool:
    if re.search(_CONCLUSION, clause, flags=re.IGNORECASE):
        return False
    # "You'll need 4 pans. If you only have 2 pans, …": a condition on the user after a result stated in
    # words (not after a bare computation: "24 × 2 = 48. If you count the teacher, you need 4 pans.")
    if re.match(r"\W*if\s+you\b", clause, flags=re.IGNORECASE) and not re.search(_RESULT_SIGN, before):
        return bool(re.search(rf"{_RESULT_VERB}{_FILLER}\s*{_NUM}", before, flags=re.IGNORECASE))
    return bool(re.search(_SIDE_NOTE, clause, flags=re.IGNORECASE)
                or (re.search(_REMAINDER, clause, flags=re.IGNORECASE) and _states_result(before)))


def _clauses(text: str) -> list[str]:
    return [c for s in _sentences(text) for c in re.split(r";|\s[–—]\s", s) if c.strip()]


def _final_statement(text: str) -> Decimal | None:
    """Rule 5: the last clause holding a number, after trailing afterthoughts."""
    clauses = [c for c in _clauses(text) if numbers(c)]
    while len(clauses) > 1 and _afterthought(clauses[-1], clauses[-2]):
        clauses.pop()
    if not clauses:
        return None
    sentences = [s for s in _sentences(text) if numbers(s)]
    if len(sentences) > 1 and re.match(r"\W*or\b", sentences[-1], flags=re.IGNORECASE):
        raise Unsure
    return read_clause(clauses[-1], prefer_last=True)


def _read_number(plain: str) -> Decimal | None:
    boxed = re.findall(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", plain)
    if boxed:
        inside = re.split(_RESULT_SIGN, boxed[-1])[-1]
        if _hedged(inside):
            raise Unsure
        found = numbers(inside)
        if found:
            return found[-1].value
    hashes = re.findall(rf"####\s*({_NUM})", plain)
    if hashes:
        return to_decimal(hashes[-1])
    body = _number_words(strip_trailing_asides(plain))
    unmarked = re.sub(r"\*\*|__", "", body)
    for phrase in reversed(list(re.finditer(_ANSWER_PHRASE, unmarked, flags=re.IGNORECASE))):
        ahead = re.search(rf"({_NUM}){_UNIT}\s*$", unmarked[:phrase.start()].split("\n")[-1], flags=re.IGNORECASE)
        if ahead and re.match(r"in\s+total", phrase.group(0), flags=re.IGNORECASE):
            return to_decimal(ahead.group(1))       # "90 km in total over the 4 weeks"
        found = read_clause(_answer_clause(unmarked[phrase.end():]))
        if found is not None:
            return found
    bold = re.findall(rf"\*\*\s*({_NUM}){_UNIT}\s*\*\*", body, flags=re.IGNORECASE)
    if bold:
        return to_decimal(bold[-1])
    return _final_statement(unmarked)


def extract_number(text: str) -> Decimal | None:
    """The final numeric answer by the rule order of the module docstring; None = unparsed."""
    try:
        return _read_number(_clean(text))
    except Unsure:
        return None


# ---------------------------------------------------------------- letters

_STATEMENT = (r"(?:(?:final\s+)?answer\s*(?:is|:|=|would\s+be|should\s+be)?|correct\s+(?:answer|option|choice)"
              r"\s*(?:is|:|would\s+be)?|best\s+(?:answer|option|choice)(?:\s+here)?\s*(?:is|:)"
              r"|(?:i'?d|i\s+would|i'll|i\s+will)\s+(?:go|choose|pick)\s*(?:with|for)?"
              r"|i\s+(?:choose|pick)|\\boxed\{)")
_REJECT_BEFORE = (r"(?:\b(?:not|never|rule\s+out|ruled\s+out|rules\s+out|eliminat\w*|exclud\w*"
                  r"|unlike|instead\s+of|rather\s+than|tempting\s+to\s+say"
                  r"|(?:might|may|could)\s+think|first\s+thought\s+was"
                  r"|(?:people|many|most|some|a\s+lot\s+of)(?:\s+\w+)?\s+(?:often\s+)?(?:pick|choose|answer|say|go\s+for)"
                  r"|at\s+first\s+glance|cannot|followed\s+by|compared\s+(?:with|to)|than)|\w+n['’]t)(?:\s+[\w']+){0,2}\s*\(?$")
_REJECT_AFTER = (r"\s*\)?\s*(?:\([^()]*\)\s*)?(?:"
                 r"(?:is|are|seems|'s|would\s+be)?\s*(?:also\s+)?(?:wrong|incorrect|out|false|a\s+distractor"
                 r"|not\s+(?:right|correct|it|the\s+answer))\b"
                 r"|(?:can'?t|cannot|couldn'?t|won'?t)\s+be\b|\w+n['’]t\b"
                 r"|(?:looks|seems|sounds)\s+(?:right|correct|good|plausible)\s*,?\s*but\b|is\s+tempting"
                 r"|[\w' ]{0,40}?\s[–—:-]\s*no\b"
                 r"|is\s+(?:the\s+|an?\s+)?[\w-]+(?:\s+[\w-]+)?\s*,\s*not\b)")
_STRONG_BEFORE = (r"\b(?:so|therefore|thus|hence|it'?s|it\s+is|is|are|must\s+be|go\s+with|choose|check|use|yes"
                  r"|i'?d\s+say)\s*(?:the\s+|an?\s+)?(?:option\s+|choice\s+)?\(?$")
# "…is the right one: C." — a letter after a colon that ends its sentence (not "described as: A) …, B) …")
_COLON_BEFORE, _COLON_AFTER = r":\s*\(?$", r"\s*\)?\s*(?:[.!]|$|\n)"
_STRONG_AFTER = (r"\s*\)?\s*(?:\([^()]*\)\s*)?(?:is\s+(?:correct|right|the\s+\w+)|fits|[\w' ]{0,40}?\s[–—:-]\s*yes\b"
                 r"|(?:does|do|is|are|works)\s*[.!]|✅)")
_ARTICLE_NEXT = {"is", "isn't", "was", "seems", "looks", "can", "can't", "cannot", "would", "could", "might",
                 "must", "fits", "and", "or", "because", "makes", "gives", "doesn't", "does", "too", "either",
                 "also", "only", "ignores", "forgets", "fails"}
_HEDGE_BETWEEN = r"\s*[)\]]?\s*(?:,?\s*or(?:\s+(?:maybe|possibly|perhaps))?|/)\s*(?:option\s+|the\s+)?\(?\s*$"
_HEDGE_WORDS = (r"\b(?:also|too|as\s+well|arguabl\w*|alternatively|possibly|maybe|perhaps"
                r"|could\s+(?:also\s+)?(?:work|be)|might\s+(?:also\s+)?(?:work|be))\b")
# "While the Declaration of Independence is famous, …": the option a sentence opens by conceding
_CONCEDED = r"\W*(?:while|although|though|even\s+though|despite)(?:\s+[\w']+){0,2}\s*\(?$"


@dataclass
class Mention:
    """One mention of an option in an answer."""
    start: int
    end: int
    letter: str
    statement: bool = False
    strong: bool = False
    rejected: bool = False


def _letters(count: int) -> str:
    return "".join(chr(ord("A") + i) for i in range(count))


def _statement_mentions(text: str, letters: str) -> list[Mention]:
    lower = f"[{letters}{letters.lower()}]"
    bare = rf"([{letters}])(?![\w'])|([{letters.lower()}])(?=\s*(?:$|[.,;!)/\n]))"   # "a mitochondrion" is no answer
    pattern = rf"(?i:{_STATEMENT})\s*(?i:option\s*|choice\s*)?(?:\(({lower})\)|\[({lower})\]|{bare})"
    return [Mention(m.start(), m.end(), next(g for g in m.groups() if g).upper(), statement=True)
            for m in re.finditer(pattern, text)]


def _letter_mentions(text: str, letters: str) -> list[Mention]:
    found = []
    for m in re.finditer(rf"(?<![\w'’-])([{letters}])(?![\w'’]|\.\w)", text):
        following = re.match(r"\s+([a-z][\w']*)", text[m.end():])
        if following and following.group(1) not in _ARTICLE_NEXT:
            continue          # "A linen closet", "A 10% rise": the article
        if m.group(1) == "A" and re.match(r"\s+\d", text[m.end():]):
            continue
        found.append(Mention(m.start(), m.end(), m.group(1)))
    for m in re.finditer(rf"\b(?:option|choice)\s+\(?([{letters.lower()}])\)?(?!\w)", text, flags=re.IGNORECASE):
        found.append(Mention(m.start(1), m.end(1), m.group(1).upper()))
    return found


def _variants(choice: str) -> list[str]:
    base = re.sub(r"^(?:a|an|the)\s+", "", choice.strip().lower())
    forms = [base, base + "s", base + "es"]
    first, _, rest = base.partition(" ")
    if rest and first.isalpha():       # "leave the building": "leaves the building", "leaving the building"
        stem = first[:-1] if first.endswith("e") else first
        forms += [f"{w} {rest}" for w in (first + "s", first + "es", stem + "ed", stem + "ing")]
    if base.endswith("on") or base.endswith("um"):
        forms.append(base[:-2] + "a")
    if base.endswith("y"):
        forms.append(base[:-1] + "ies")
    return forms


def _text_mentions(text: str, choices: tuple[str, ...], letters: str) -> list[Mention]:
    lowered, found = text.lower(), []
    order = sorted(range(len(choices)), key=lambda i: -len(choices[i]))
    for i in order:
        for form in sorted(_variants(choices[i]), key=len, reverse=True):
            for m in re.finditer(rf"(?<![\w^]){re.escape(form)}(?![\w^])", lowered):
                found.append(Mention(m.start(), m.end(), letters[i]))
                lowered = lowered[:m.start()] + "\0" * (m.end() - m.start()) + lowered[m.end():]
    return found


_SENTENCE_BREAK = re.compile(r"[.!?\n]\s+|\n")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
# the patterns each mention is judged by, compiled once (extraction reads every answer of a run)
_REJECTED_BEFORE = re.compile(_REJECT_BEFORE, re.IGNORECASE)
_CONCEDED_BEFORE = re.compile(_CONCEDED, re.IGNORECASE)
_REJECTED_AFTER = re.compile(_REJECT_AFTER, re.IGNORECASE)
_STRONG_BEFORE_RE = re.compile(_STRONG_BEFORE, re.IGNORECASE)
_STRONG_AFTER_RE = re.compile(_STRONG_AFTER, re.IGNORECASE)
_COLON_BEFORE_RE, _COLON_AFTER_RE = re.compile(_COLON_BEFORE), re.compile(_COLON_AFTER)


@functools.lru_cache(maxsize=4)
def _breaks(text: str) -> list[int]:
    """Where each sentence break of the whole text ends, in order (the text of one answer is read
    for each of its mentions)."""
    return [m.end() for m in _SENTENCE_BREAK.finditer(text)]


def _sentence_span(text: str, pos: int) -> tuple[int, int]:
    """The sentence around `pos`: from the end of the last break in text[:pos] to the next end."""
    ends = _breaks(text)
    before = bisect.bisect_right(ends, pos)   # the breaks that end by pos are text[:pos]'s too
    start = ends[before - 1] if before else 0
    for cut in _SENTENCE_BREAK.finditer(text, start, pos):   # a break that runs past pos ends at it there
        start = cut.end()
    end = _SENTENCE_END.search(text, pos)
    return start, (end.start() if end else len(text))


def _judge(text: str, mention: Mention) -> None:
    sentence_start, _ = _sentence_span(text, mention.start)
    before, after = text[sentence_start:mention.start], text[mention.end:]
    mention.rejected = bool(_REJECTED_BEFORE.search(before) or _CONCEDED_BEFORE.match(before)
                            or _REJECTED_AFTER.match(after))
    mention.strong = bool(_STRONG_BEFORE_RE.search(before) or _STRONG_AFTER_RE.match(after)
                          or (_COLON_BEFORE_RE.search(before) and _COLON_AFTER_RE.match(after)))


_JOINED = re.compile(r"\s*\)?\s*(?:,|,?\s*(?:or|and|nor))\s*(?:the\s+|an?\s+|option\s+)?\(?\s*", re.IGNORECASE)
_BUT = re.compile(r"\bbut\b")
_HEDGED_BETWEEN = re.compile(_HEDGE_BETWEEN, re.IGNORECASE)
_HEDGED_AFTER = re.compile(r"[^\n]*" + _HEDGE_WORDS, re.IGNORECASE)


def _spread_over_lists(text: str, mentions: list[Mention]) -> None:
    """"isn't C or D", "a mailbox, sink or bathtub wouldn't": a mention joined by "or", "and" or a comma
    to a rejected one is rejected, forward and backward."""
    changed = True
    while changed:
        changed = False
        for a, b in zip(mentions, mentions[1:]):
            if a.rejected != b.rejected and _JOINED.fullmatch(text[a.end:b.start]):
                a.rejected = b.rejected = changed = True


def _spread_rejection(text: str, mentions: list[Mention]) -> None:
    """In "X …, but Y …" (one sentence) X is rejected."""
    for i, m in enumerate(mentions):
        _, end = _sentence_span(text, m.start)
        later = [o for o in mentions[i + 1:] if o.start < end and o.letter != m.letter and not o.rejected]
        if not m.statement and any(_BUT.search(text[m.end:o.start]) for o in later):
            m.rejected = True


def _hedged_choice(text: str, kept: list[Mention]) -> bool:
    for i, m in enumerate(kept):
        for o in kept[i + 1:]:
            if o.letter == m.letter:
                continue
            _, end = _sentence_span(text, o.start)
            if _HEDGED_BETWEEN.fullmatch(text[m.end:o.start]) or _HEDGED_AFTER.match(text[m.end:end]):
                return True
    return False


def _verdict_marks(text: str, letters: str) -> str:
    """"❌ A — …" / "✅ B — …" as the words the rules read: "A – no — …" / "B – yes — …"."""
    text = re.sub(rf"[❌✗✘]\s*\(?([{letters}])\)?", r"\1 – no", text)
    return re.sub(rf"[✅✔✓]\s*\(?([{letters}])\)?", r"\1 – yes", text)


def _judged_mentions(text: str, choices: tuple[str, ...], letters: str) -> list[Mention]:
    """Every mention of an option, in order, each marked statement / strong / rejected."""
    statements = _statement_mentions(text, letters)
    spans = {(m.start, m.end) for m in statements}
    others = [m for m in _letter_mentions(text, letters) + _text_mentions(text, choices, letters)
              if not any(s <= m.start < e for s, e in spans)]
    mentions = sorted(statements + others, key=lambda m: m.start)
    for m in mentions:
        _judge(text, m)
    _spread_over_lists(text, mentions)
    return mentions


def _decide(text: str, choices: tuple[str, ...], letters: str) -> str | None:
    """Rules 2-5 of the module docstring."""
    mentions = _judged_mentions(text, choices, letters)
    if _hedged_choice(text, [m for m in mentions if not m.rejected]):
        return None
    _spread_rejection(text, mentions)
    rejected = {m.letter for m in mentions if m.rejected}
    candidates = [m for m in mentions if m.letter not in rejected]
    for tier in ([m for m in candidates if m.statement], [m for m in candidates if m.strong]):
        if tier:
            return tier[-1].letter
    neutral = {m.letter for m in candidates}
    return neutral.pop() if len(neutral) == 1 else None


def extract_choice(text: str, choices: tuple[str, ...]) -> str | None:
    """The chosen letter by the rule order of the module docstring; None = unparsed."""
    letters = _letters(len(choices))
    plain = _clean(text)
    stripped = re.sub(r"[*_`'\".()\[\]\s:]", "", plain)
    if len(stripped) == 1 and stripped.upper() in letters:
        return stripped.upper()
    plain = strip_trailing_asides(plain, remains=r"\w")
    unmarked = _verdict_marks(re.sub(r"\*\*|__", "", plain), letters)
    return _decide(unmarked, choices, letters)


def read_answer(text: str, choices: tuple[str, ...], gold: str) -> tuple[bool, bool]:
    """(correct, unparsed) of one answer, from one extraction: correct is an exact match; unparsed,
    the extractor reads no answer (none, a range, two candidates, only rejections), and an unparsed
    answer is not correct (it is counted by `IRP_unparsed`)."""
    if choices:
        letter = extract_choice(text, choices)
        return letter == gold.strip().upper(), letter is None
    value, target = extract_number(text), to_decimal(gold)
    return value is not None and target is not None and value == target, value is None
