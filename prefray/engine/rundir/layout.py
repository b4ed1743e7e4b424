"""Every path of a run directory, named once.

    RUN_DIR/
      manifest.json          the configs of every job launched into it (results/manifest.py)
      shards/benchmark=B/model=M/condition=C/*.parquet   the stored rows (rundir/shards.py)
      requests/              every distinct request sent (results/request_store.py)
      ledger/                the gateways' record of every try that reached a provider (rundir/paid.py)
      journal/               answers received but maybe not yet stored (rundir/journal.py)
      batches/               provider batch jobs of the batch tier (calls/batch/records.py)
      quarantine/            shards found unreadable, moved aside (rundir/quarantine.py)
      metrics.{parquet,csv,md}, deltas.{parquet,csv}, calls.csv, costs.csv, judge_agreement.csv
      incomplete.csv         units left without an answer (flow/outcome.py)
      plots/                 the figures
      .prefray.lock, .prefray.lease, .manifest.lock   ownership (rundir/ownership.py)
      .view/                 the viewer's index

The response cache is kept beside the run directory: <parent>/.prefray-cache/responses.sqlite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SHARDS = "shards"
REQUESTS = "requests"
LEDGER = "ledger"
JOURNAL = "journal"
BATCHES = "batches"
PLOTS = "plots"
VIEW_INDEX = ".view"
MANIFEST = "manifest.json"
MANIFEST_LOCK = ".manifest.lock"
LOCK = ".prefray.lock"
LEASE = ".prefray.lease"
METRICS_PARQUET, METRICS_CSV, METRICS_MD = "metrics.parquet", "metrics.csv", "metrics.md"
DELTAS_PARQUET, DELTAS_CSV = "deltas.parquet", "deltas.csv"
CALLS_CSV = "calls.csv"
COSTS_CSV = "costs.csv"
JUDGE_AGREEMENT_CSV = "judge_agreement.csv"
INCOMPLETE_CSV = "incomplete.csv"
CACHE_FOLDER, CACHE_FILE = ".prefray-cache", "responses.sqlite"
# Folders the gateways append to (JSON lines), synced to object storage on their own schedule.
LOG_FOLDERS = (JOURNAL, LEDGER)


@dataclass(frozen=True)
class RunDir:
    """A run directory's paths (`.shards`, `.metrics_csv`, `.job(b, m, c)`, ...): built once where a command
    learns its run dir, then passed down as the run dir parameter."""

    root: Path

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    def __getstate__(self) -> dict[str, Path]:
        """Sent to another process (a Ray actor, whose working directory is not the driver's), the
        handle carries its absolute path."""
        return {"root": self.root.resolve()}

    def __str__(self) -> str:
        return str(self.root)

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    # stored rows and records
    @property
    def shards(self) -> Path:
        return self.root / SHARDS

    def job(self, benchmark: str, model: str, condition: str) -> Path:
        """One job's shard folder."""
        return self.shards / f"benchmark={benchmark}" / f"model={model}" / f"condition={condition}"

    @property
    def requests(self) -> Path:
        return self.root / REQUESTS

    @property
    def ledger(self) -> Path:
        return self.root / LEDGER

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL

    @property
    def batches(self) -> Path:
        return self.root / BATCHES

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def manifest_lock(self) -> Path:
        return self.root / MANIFEST_LOCK

    # ownership
    @property
    def lock(self) -> Path:
        return self.root / LOCK

    # outputs
    @property
    def metrics_parquet(self) -> Path:
        return self.root / METRICS_PARQUET

    @property
    def metrics_csv(self) -> Path:
        return self.root / METRICS_CSV

    @property
    def metrics_md(self) -> Path:
        return self.root / METRICS_MD

    @property
    def deltas_parquet(self) -> Path:
        return self.root / DELTAS_PARQUET

    @property
    def deltas_csv(self) -> Path:
        return self.root / DELTAS_CSV

    @property
    def calls_csv(self) -> Path:
        return self.root / CALLS_CSV

    @property
    def costs_csv(self) -> Path:
        return self.root / COSTS_CSV

    @property
    def judge_agreement_csv(self) -> Path:
        return self.root / JUDGE_AGREEMENT_CSV

    @property
    def incomplete_csv(self) -> Path:
        return self.root / INCOMPLETE_CSV

    @property
    def plots(self) -> Path:
        return self.root / PLOTS

    @property
    def view_index(self) -> Path:
        return self.root / VIEW_INDEX

    # what a killed run leaves behind
    def leftover_temp_files(self) -> list[Path]:
        """Temp files of shards and of the manifest that a kill left behind."""
        return list(self.shards.glob("**/.*.tmp")) + list(self.root.glob(f".{MANIFEST}.*.tmp"))

    # beside the run directory
    @property
    def default_cache(self) -> Path:
        """The response cache shared by the runs of one parent folder."""
        return self.root.resolve().parent / CACHE_FOLDER / CACHE_FILE
