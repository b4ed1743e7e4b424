"""The run manifest: resolved configs (no secrets), git revision, package versions, command."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

from prefray.engine.rundir import RunDir

PACKAGES = ("prefray", "ray", "pyarrow", "openai", "anthropic", "aiolimiter", "hydra-core", "xllamacpp")


def git_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def scrub(text: str, secret_envs: set[str]) -> str:
    """Replace the value of every secret environment variable that slipped into `text`."""
    for env in secret_envs:
        value = os.environ.get(env)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def append_manifest(run: RunDir, jobs: list[dict[str, Any]], secret_envs: set[str]) -> None:
    """Add this launch to the manifest: read-modify-write under an exclusive lock, written to a
    temp file with a unique name and renamed into place, so no launch's entry is ever lost."""
    path = run.manifest
    entry = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": [sys.executable, *sys.argv],
        "git_revision": git_revision(),
        "packages": package_versions(),
        "jobs": jobs,
    }
    with open(run.manifest_lock, "a") as guard:
        fcntl.flock(guard.fileno(), fcntl.LOCK_EX)
        history = json.loads(path.read_text()) if path.exists() else {"runs": []}
        history["runs"].append(entry)
        temp = path.with_name(f".manifest.json.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            temp.write_text(scrub(json.dumps(history, indent=2, sort_keys=True), secret_envs))
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)


def recorded_configs(run_dir: RunDir) -> list[dict[str, Any]]:
    """The resolved config of every job ever launched into the run dir (latest launch wins)."""
    path = run_dir.manifest
    if not path.exists():
        raise FileNotFoundError(f"{run_dir.root}: no manifest.json — not a prefray run directory")
    jobs: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for run in json.loads(path.read_text())["runs"]:
        for job in run["jobs"]:
            jobs[(job["benchmark"], job["model"], job["condition"], job["judge"])] = job["config"]
    return list(jobs.values())


# Model keys a rerun may change: where and how fast calls go, never what an answer means.
ENDPOINT_KEYS = ("base_url", "api_key_env", "rpm", "tpm", "max_concurrency", "timeout_s", "max_wait_s",
                 "max_attempts")


def apply_run_overrides(configs: list[dict[str, Any]], overrides: list[str], location: Path | str) -> None:
    """Set `run.KEY=VALUE`, `model.KEY=VALUE` and `judge.KEY=VALUE` overrides (typed as a launch's
    are: `override_value`) on every config; run.dir stays `location` (the run dir as given) and
    model/judge keys are limited to ENDPOINT_KEYS."""
    for override in overrides:
        key, sep, value = override.partition("=")
        section, _, name = key.partition(".")
        allowed = (section == "run" and name and name != "dir") or (section in ("model", "judge")
                                                                   and name in ENDPOINT_KEYS)
        if not sep or not allowed:
            raise ValueError(f"'{override}': only run.KEY (not run.dir) and model./judge.KEY for KEY in "
                             f"{', '.join(ENDPOINT_KEYS)} can change on a rerun")
        for cfg in configs:
            _set_dotted(cfg[section], name, override_value(value))
    for cfg in configs:
        cfg["run"]["dir"] = str(location)


def override_value(text: str) -> Any:
    """A command-line value typed as YAML types it, except that a number in exponent form without a
    dot (`1e-9`, `2E5`), which YAML 1.1 leaves a string, is a float, as a launch's overrides read it."""
    import yaml

    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in "eE") and value.strip() == value else value
        except ValueError:
            return value
    return value


def _set_dotted(section: dict[str, Any], name: str, value: Any) -> None:
    """`batch.max_age_s` sets section["batch"]["max_age_s"] (nested settings such as run.batch.*)."""
    *parents, leaf = name.split(".")
    for parent in parents:
        section = section.setdefault(parent, {})
    section[leaf] = value


# Settings that decide what a stored unit means: resuming with other values would mix answers.
_MODEL_KEYS = ("provider", "model_id", "params", "max_output_tokens", "reasoning_tokens")


def result_identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """The parts of a job's config that its stored answers depend on (not limits, paths or URLs)."""
    return {
        # more samples only add units; every other benchmark setting shapes the stored answers
        "benchmark": {k: v for k, v in cfg["benchmark"].items() if k != "samples"},
        "condition": cfg["condition"],
        "model": {k: cfg["model"].get(k) for k in _MODEL_KEYS},
        "judge": {k: cfg["judge"].get(k) for k in _MODEL_KEYS},
        "seed": cfg["run"].get("seed"),
    }


def conflicting_jobs(run_dir: RunDir, configs: list[dict[str, Any]]) -> list[str]:
    """Jobs this launch shares with earlier launches into the run dir but with other settings."""
    if not run_dir.manifest.exists():
        return []
    earlier = {(c["benchmark"]["name"], c["model"]["name"], c["condition"]["name"], c["judge"]["name"]): c
               for c in recorded_configs(run_dir)}
    conflicts = []
    for cfg in configs:
        key = (cfg["benchmark"]["name"], cfg["model"]["name"], cfg["condition"]["name"], cfg["judge"]["name"])
        before = earlier.get(key)
        if before is None:
            continue
        old, new = result_identity(before), result_identity(cfg)
        changed = sorted(_diff(old, new))
        if changed:
            conflicts.append(f"{'/'.join(key)}: {', '.join(changed)}")
    return conflicts


def _diff(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new))
                for d in _diff(old.get(k), new.get(k), f"{path}.{k}".lstrip("."))]
    return [] if old == new else [path]
