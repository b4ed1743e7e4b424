"""Pages of the docs site made when it is built (mkdocs `hooks:`), so each keeps one source:

- `benchmarks/<name>.md`: `prefray/benchmarks/<name>/README.md`, included as it is;
- `jobs.md`: `jobs/README.md`;
- `reference.md`: every config key and every failure cause, printed from the typed schema and the
  one list of causes by `prefray.app.table` (the tables cannot drift from the code).

Relative links in an included README are rewritten for the page's new place: a link to another
included README goes to its page; a link to any other file of the repository (code next to the
README) becomes the file's path in a code span, since the site holds no source files.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

REFERENCE_INTRO = """\
# Config reference

Every composed config is checked against one typed schema (`prefray/engine/config/schema.py`; the
checks: `prefray/app/validate.py`) before Ray starts: a value outside what its key allows, or a key
that does not exist (`+foo=1`), stops the launch with exit code 2 and one line naming the key, the
value and what is allowed, and nothing is written. `run.dir` and `run.cache_dir` must be (or be
creatable as) directories this user can write; a dataset with no instances is refused too. Benchmark
and condition keys keep the type of their default in the option file; `max_tokens`, `temperature`,
`top_p`, `samples` and `top_k` keep their bounds wherever they appear. What the config groups hold,
and how to pick options, is on [Configuration](configuration.md).

This page is generated from the schema and the option files when the site is built
(`prefray/app/table.py`, which also prints the same tables when run as a module).

## Every key and what it accepts

"""

CAUSES_INTRO = """

## Failure causes

Every row that did not end ok carries one cause (its `cause` column). The causes are one list in the
code (`prefray/engine/types.py`, `Cause`), which the runner, the failure policy, `prefray rerun` and
this table all read. What the classes mean for a cell's numbers is on
[Failures and recovery](failures.md#one-failure-policy).

"""


def included_pages() -> dict[str, str]:
    """Site page -> repository file, for every README the site includes."""
    pages = {"jobs.md": "jobs/README.md"}
    for readme in sorted((ROOT / "prefray" / "benchmarks").glob("*/README.md")):
        pages[f"benchmarks/{readme.parent.name}.md"] = readme.relative_to(ROOT).as_posix()
    return pages


def reference_page(conf: Path | None = None) -> str:
    """The config reference page: the key table and the cause table, from the code."""
    from prefray.app.table import cause_table, default_conf, key_table

    tables = [_text_not_tags(table) for table in (key_table(conf or default_conf()), cause_table())]
    return REFERENCE_INTRO + tables[0] + CAUSES_INTRO + tables[1] + "\n"


def _text_not_tags(table: str) -> str:
    """A table's `<` outside code spans as text (`outputs/<timestamp>` would read as an HTML tag)."""
    return "\n".join("`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(line.split("`")))
                     for line in table.splitlines())


LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def included_page(page: str, source: str, pages: dict[str, str]) -> str:
    """The README at `source`, its relative links pointed from its site page `page`."""
    by_source = {src: uri for uri, src in pages.items()}
    text = (ROOT / source).read_text(encoding="utf-8")

    def relink(match: re.Match) -> str:
        target = match["target"]
        if re.match(r"[a-z][a-z0-9+.-]*:", target):          # http:, https:, mailto: ...
            return match[0]
        in_repo = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        if in_repo in by_source:
            relative = posixpath.relpath(by_source[in_repo], posixpath.dirname(page) or ".")
            return f"[{match['text']}]({relative}{match['anchor'] or ''})"
        return f"{match['text']} (`{in_repo}`)"

    return LINK.sub(relink, text)


def on_files(files, config):
    from mkdocs.structure.files import File

    pages = included_pages()
    for uri, source in pages.items():
        files.append(File.generated(config, uri, content=included_page(uri, source, pages)))
    files.append(File.generated(config, "reference.md", content=reference_page()))
    return files


def on_serve(server, config, builder):
    """`mkdocs serve` rebuilds when an included README or the schema changes."""
    for source in included_pages().values():
        server.watch(str(ROOT / source))
    server.watch(str(ROOT / "prefray" / "engine" / "config"))
    server.watch(str(ROOT / "conf"))
    return server
