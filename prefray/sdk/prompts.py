"""Prompts in files: `read_prompt` and `prompt_path` read `prompts/NAME.txt` beside a benchmark or the
file a run names with `benchmark.prompts.NAME=PATH` (`prompt_overrides`), `check_prompt_overrides`
lists what is wrong with those; `cache_through` gives a request's `cache_prefix` (its text up to the
end of the part its requests repeat)."""

from prefray.engine.prompts import check_prompt_overrides, prompt_overrides, prompt_path, read_prompt
from prefray.engine.types import cache_through

__all__ = ["cache_through", "check_prompt_overrides", "prompt_overrides", "prompt_path", "read_prompt"]
