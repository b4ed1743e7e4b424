"""Structural check for the CUPID sample file (cupid_sample.jsonl).

Run: python check_sample.py
"""

import json
from collections import defaultdict
from pathlib import Path
from statistics import mean

SAMPLE_PATH = Path(__file__).with_name("cupid_sample.jsonl")

ROW_FIELDS = {
    "persona_id",
    "instance_type",
    "current_request",
    "current_context_factor",
    "current_contextual_preference",
    "current_checklist",
    "prior_interactions",
}
SESSION_FIELDS = {"context_factor", "contextual_preference", "dialogue"}
TURN_FIELDS = {"role", "content"}
INSTANCE_TYPES = {"consistent", "contrastive", "changing"}
N_SESSIONS = 8


def load(path=SAMPLE_PATH):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def oracle_indices(row):
    """Indices of prior sessions the oracle setting would select."""
    return [
        i
        for i, s in enumerate(row["prior_interactions"])
        if s["context_factor"] == row["current_context_factor"]
        and s["contextual_preference"] == row["current_contextual_preference"]
    ]


def check_session(tag, s):
    assert set(s) == SESSION_FIELDS, f"{tag}: session fields {sorted(s)}"
    assert isinstance(s["context_factor"], str) and s["context_factor"].strip(), tag
    assert isinstance(s["contextual_preference"], str) and s["contextual_preference"].strip(), tag
    dlg = s["dialogue"]
    assert isinstance(dlg, list) and 4 <= len(dlg) <= 8, f"{tag}: {len(dlg)} turns"
    for j, t in enumerate(dlg):
        assert set(t) == TURN_FIELDS, f"{tag} turn {j}: fields {sorted(t)}"
        want = "user" if j % 2 == 0 else "assistant"
        assert t["role"] == want, f"{tag} turn {j}: role {t['role']!r}, expected {want!r}"
        assert isinstance(t["content"], str) and t["content"].strip(), f"{tag} turn {j}: empty"
    # The preference is revealed through feedback, never quoted verbatim.
    assert all(s["contextual_preference"] not in t["content"] for t in dlg), f"{tag}: preference leaked"


def check_row(k, row):
    tag = f"row {k} ({row.get('persona_id')}/{row.get('instance_type')})"
    assert set(row) == ROW_FIELDS, f"{tag}: fields {sorted(row)}"
    assert row["instance_type"] in INSTANCE_TYPES, tag
    for key in ("persona_id", "current_request", "current_context_factor", "current_contextual_preference"):
        assert isinstance(row[key], str) and row[key].strip(), f"{tag}: {key}"
    pref = row["current_contextual_preference"]
    assert 15 <= len(pref.split()) <= 25, f"{tag}: preference has {len(pref.split())} words"
    assert pref not in row["current_request"], f"{tag}: preference leaked into the request"

    checklist = row["current_checklist"]
    assert isinstance(checklist, list) and 2 <= len(checklist) <= 4, f"{tag}: checklist size"
    assert all(isinstance(c, str) and c.strip().endswith("?") for c in checklist), f"{tag}: checklist items"

    sessions = row["prior_interactions"]
    assert isinstance(sessions, list) and len(sessions) == N_SESSIONS, f"{tag}: {len(sessions)} sessions"
    for i, s in enumerate(sessions):
        check_session(f"{tag} session {i}", s)

    cf = row["current_context_factor"]
    same_cf = [i for i, s in enumerate(sessions) if s["context_factor"] == cf]
    oracle = oracle_indices(row)
    assert len(oracle) >= 1, f"{tag}: no oracle session"

    if row["instance_type"] in ("consistent", "contrastive"):
        assert 2 <= len(same_cf) <= 3, f"{tag}: {len(same_cf)} sessions share the current context factor"
        assert oracle == same_cf, f"{tag}: a same-context session has a different preference"
    if row["instance_type"] == "contrastive":
        # A contrasting context factor should appear more than once, with a different preference.
        counts = defaultdict(set)
        for s in sessions:
            if s["context_factor"] != cf:
                counts[s["context_factor"]].add(s["contextual_preference"])
        repeated = [c for c in counts if sum(s["context_factor"] == c for s in sessions) >= 2]
        assert repeated, f"{tag}: no repeated contrasting context factor"
        assert all(pref not in counts[c] for c in repeated), tag
    if row["instance_type"] == "changing":
        assert len(same_cf) >= 2, f"{tag}: need an old and a new session"
        assert sessions[same_cf[-1]]["contextual_preference"] == pref, f"{tag}: latest session is not current"
        assert sessions[same_cf[0]]["contextual_preference"] != pref, f"{tag}: earliest session has no old preference"
    return oracle


def main():
    rows = load()
    assert len(rows) == 6, f"expected 6 rows, got {len(rows)}"

    by_persona = defaultdict(list)
    for row in rows:
        by_persona[row["persona_id"]].append(row["instance_type"])
    assert len(by_persona) == 2, f"expected 2 personas, got {sorted(by_persona)}"
    for pid, types in by_persona.items():
        assert sorted(types) == sorted(INSTANCE_TYPES), f"{pid}: instance types {types}"

    oracle_per_row = []
    turns = []
    for k, row in enumerate(rows):
        oracle_per_row.append((row["persona_id"], row["instance_type"], check_row(k, row)))
        turns.extend(len(s["dialogue"]) for s in row["prior_interactions"])

    print(f"OK: {len(rows)} rows, {len(by_persona)} personas, {len(turns)} dialogues")
    print(f"turns per dialogue: mean {mean(turns):.2f}, min {min(turns)}, max {max(turns)}")
    print("oracle sessions per row:")
    for pid, itype, idx in oracle_per_row:
        print(f"  {pid:<22} {itype:<12} {len(idx)}  (indices {idx})")


if __name__ == "__main__":
    main()
