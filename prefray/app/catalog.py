"""The installed benchmarks: every entry of the `prefray.benchmarks` entry point group.

An entry is `NAME = "package.module:ATTRIBUTE"` (the attribute: a `Benchmark` object). Its config
sits next to the module: `<folder>/NAME.yaml` holds the `benchmark.*` keys and
`<folder>/conditions/<condition>.yaml` one file per condition the config lists (`conditions:`).
Conditions are namespaced by benchmark: two benchmarks may each define `default`. prefray's own
benchmarks register the same way (pyproject.toml); `benchmark=all` means those (the built-in suite),
`benchmark='glob(*)'` every installed one.

For Hydra, each benchmark config is the option `benchmark=NAME` and each of its conditions the
option `condition=NAME/CONDITION` (stored in Hydra's config store by `register`); the sweep writes
those overrides, users write `condition=CONDITION`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from prefray.engine.benchmark import Benchmark

GROUP = "prefray.benchmarks"
HOME_DIST = "prefray"  # the distribution whose benchmarks make up `benchmark=all`


class UnknownBenchmark(ValueError):
    """A benchmark name no installed package registers; the message lists what is installed."""


@dataclass(frozen=True)
class Installed:
    name: str
    impl: str        # "package.module:ATTRIBUTE"
    folder: Path     # holds NAME.yaml and conditions/
    builtin: bool    # shipped with prefray itself

    @property
    def config_file(self) -> Path:
        return self.folder / f"{self.name}.yaml"

    def condition_file(self, condition: str) -> Path:
        return self.folder / "conditions" / f"{condition}.yaml"


def _folder(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None:
        raise UnknownBenchmark(f"entry point module '{module}' cannot be found")
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(str(spec.origin)).parent


@cache
def installed() -> dict[str, Installed]:
    """Every registered benchmark by name (the first distribution on the path wins a name)."""
    found: dict[str, Installed] = {}
    for entry in importlib.metadata.entry_points(group=GROUP):
        if entry.name in found:
            continue
        dist = entry.dist.name if entry.dist is not None else ""
        found[entry.name] = Installed(entry.name, entry.value, _folder(entry.module), dist == HOME_DIST)
    return dict(sorted(found.items()))


def names(builtin_only: bool = False) -> list[str]:
    return [n for n, b in installed().items() if b.builtin or not builtin_only]


def find(name: str) -> Installed:
    try:
        return installed()[name]
    except KeyError:
        listed = ", ".join(installed()) or f"none (no package registers the '{GROUP}' entry point group)"
        raise UnknownBenchmark(f"unknown benchmark '{name}'; installed: {listed}") from None


def _read(path: Path, where: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if not path.is_file():
        raise UnknownBenchmark(f"{where}: no config file {path}")
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    if not isinstance(data, dict):
        raise UnknownBenchmark(f"{path}: a mapping of keys is expected")
    return data


@cache
def _benchmark_config(name: str) -> dict[str, Any]:
    found = find(name)
    data = _read(found.config_file, f"benchmark={name}")
    data.pop("defaults", None)
    # `name` and `impl` come from the entry point (a stored config keeps both, so a rerun needs no lookup)
    return {"name": name, "impl": found.impl, **{k: v for k, v in data.items() if k not in ("name", "impl")}}


def benchmark_config(name: str) -> dict[str, Any]:
    """The benchmark's config as written (interpolations unresolved), with its `name` and `impl`."""
    return dict(_benchmark_config(name))


def conditions(name: str) -> tuple[list[str], str]:
    """The conditions a benchmark defines, in its order, and its default condition."""
    cfg = _benchmark_config(name)
    listed = [str(c) for c in cfg.get("conditions") or []]
    return listed, str(cfg.get("default_condition") or (listed[0] if listed else ""))


@cache
def _condition_config(benchmark: str, condition: str) -> dict[str, Any]:
    data = _read(find(benchmark).condition_file(condition), f"benchmark={benchmark} condition={condition}")
    data.pop("defaults", None)
    return {"name": condition, **{k: v for k, v in data.items() if k != "name"}}


def condition_config(benchmark: str, condition: str) -> dict[str, Any]:
    """One condition of a benchmark, as written, with its `name`."""
    return dict(_condition_config(benchmark, condition))


def load(name: str) -> Benchmark:
    """The benchmark object of an installed benchmark (a `Benchmark`, else UnknownBenchmark)."""
    impl = find(name).impl
    loaded = importlib.metadata.EntryPoint(name, impl, GROUP).load()
    if not isinstance(loaded, Benchmark):
        raise UnknownBenchmark(f"benchmark={name}: {impl} is a {type(loaded).__name__}, not a Benchmark "
                               "(subclass prefray.sdk.Benchmark and register an instance)")
    return loaded


def register(names: Iterable[str] | None = None) -> None:
    """These installed benchmarks (default: every one) and their conditions as options of Hydra's
    config store (each reads its config and every condition's file)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for name in installed() if names is None else sorted(set(names) & set(installed())):
        store.store(group="benchmark", name=name, node=OmegaConf.create(_benchmark_config(name)))
        for condition in conditions(name)[0]:
            store.store(group=f"condition/{name}", name=condition,
                        node=OmegaConf.create(_condition_config(name, condition)))
