"""Exact-match answer extraction for PRISK's benchmark-adapted IRP items (GSM8K, CSQA, MMLU).

The answer is read as the model gave it; rules are tried in this order and the first that finds
something decides.

Numbers (`extract_number`):
  0. Markdown emphasis and code marks (`**`, `__`, backticks) and LaTeX spacing/`\\text{}`
     wrappers are removed; `$` and thousands separators (`1,234`) are kept for reading.
  1. The last `\\boxed{...}`: the last number inside it.
  2. The last `#### n`.
  3. The last explicit answer phrase ("final answer", "the answer is", "answer:", "total:",
     "result:", "in total"): the text after it up to the end of its line. If the first number there
     starts an expression, possibly after a unit word ("$18 + $2 = $20", "14 gallons × $3.50 =
     $49"), the number after the expression's last "=" is read;
     otherwise the first number ("The answer is 90 km (not 22.5)" reads 90).
  4. The last bold span that holds only a number, optionally with a currency sign or unit
     ("**12** weeks", "**$20**").
  5. The last number of the text ("... = 48 cupcakes ... You need 4 full pans." reads 4).
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


def _after_phrase(segment: str) -> str | None:
    first = re.search(_NUM, segment)
    if first is None:
        return None
    rest = segment[first.end():]
    if re.match(r"\s*(?:[a-z]+\s+){0,2}[-+*/×x÷]\s*[$\d(]", rest, flags=re.IGNORECASE) and "=" in rest:
        last = re.findall(_NUM, rest.rsplit("=", 1)[1])
        if last:
            return last[0]
    return first.group(0)


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
    unmarked = re.sub(r"\*\*|__", "", plain)
    phrases = list(re.finditer(_ANSWER_PHRASE, unmarked, flags=re.IGNORECASE))
    for phrase in reversed(phrases):
        segment = unmarked[phrase.end():].split("\n", 1)[0]
        found = _after_phrase(segment)
        if found is not None:
            return to_decimal(found)
    bold = re.findall(rf"\*\*\s*({_NUM}){_UNIT}\s*\*\*", plain, flags=re.IGNORECASE)
    if bold:
        return to_decimal(bold[-1])
    numbers = re.findall(_NUM, unmarked)
    return to_decimal(numbers[-1]) if numbers else None


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
