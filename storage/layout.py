"""Every path MOSAIC writes, derived from one data root."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_STEM = re.compile(r"(\.xml)?(\.gz)?$")
_NCBI_NAME = re.compile(r"^(?:pubmed|medline)(\d{2})n(\d{4})$")


def partition_name(file_name: str) -> str:
    """``pubmed25n0001.xml.gz`` → ``pubmed25n0001``: the partition key of a source file."""
    stem = _STEM.sub("", Path(file_name).name)
    if not stem or not re.fullmatch(r"[A-Za-z0-9._-]+", stem):
        raise ValueError(
            f"source file name {file_name!r} cannot be a partition name: use letters, digits, '.', '_', '-'"
        )
    return stem


def data_root_of(path: str | Path) -> Path | None:
    """The MOSAIC data root ``path`` lies in (the nearest folder, ``path`` itself included, with a
    catalog or manifests), or None."""
    path = Path(path).expanduser().resolve()
    return next((p for p in (path, *path.parents) if (p / "catalog.duckdb").is_file() or (p / "manifests").is_dir()),
                None)


def file_sequence(file_name: str) -> int:
    """Order of a source file in the snapshot: later files revise earlier ones.

    NCBI names ``pubmedYYnNNNN`` number baseline and update files in one sequence per
    year, so (YY, NNNN) orders them. Other names get -1 (no revision order known): ties
    are then broken by PMID version and record position.
    """
    m = _NCBI_NAME.match(partition_name(file_name))
    return int(m.group(1)) * 100_000 + int(m.group(2)) if m else -1


@dataclass(frozen=True)
class DataLayout:
    """``DataLayout(root)``: the on-disk layout of one MOSAIC data root."""

    root: Path

    def __post_init__(self) -> None:
        root = Path(self.root).expanduser().resolve()
        if "?" in str(root):
            # DuckDB reads what follows a '?' in a database path as options and cannot open the catalog.
            raise ValueError(f"data root {root}: a path holding '?' cannot hold a DuckDB catalog; choose one without "
                             "'?' (other characters, '[' and '*' included, are fine)")
        object.__setattr__(self, "root", root)

    @property
    def raw_dir(self) -> Path:
        return self.root / "raw"

    @property
    def snapshot_state_path(self) -> Path:
        """The snapshot signature of the last successful rebuild."""
        return self.root / "state" / "last_snapshot.json"

    @property
    def ticks_path(self) -> Path:
        """The record of every tick (full or update) of the root (``storage/ticks.py``)."""
        return self.root / "state" / "ticks.json"

    @property
    def trained_pairs_path(self) -> Path:
        """The content hashes of the pairs the live models trained on (``storage/ticks.py``)."""
        return self.root / "state" / "trained_pairs.parquet"

    def tick_dir(self, tick: int) -> Path:
        """An update tick's pairs (``pairs.jsonl``) and models."""
        return self.models_dir / "ticks" / str(tick)

    @property
    def heldout_record_path(self) -> Path:
        """The held-out split's thresholds and the last run's test pairs (``storage/heldout.py``)."""
        return self.root / "state" / "heldout.json"

    @property
    def evaluations_dir(self) -> Path:
        return self.root / "evaluations"

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    @property
    def current_model_path(self) -> Path:
        """A symbolic link to the published model in use."""
        return self.root / "models" / "current"

    @property
    def published_models_dir(self) -> Path:
        """Immutable copies of published models, one folder per run."""
        return self.root / "models" / "published"

    @property
    def decisions_dir(self) -> Path:
        """One JSON record per publish decision."""
        return self.root / "decisions"

    def dataset_dir(self, dataset: str) -> Path:
        return self.root / dataset

    def partition_path(self, dataset: str, partition: str) -> Path:
        return self.root / dataset / f"source={partition}" / "part.parquet"

    def manifest_path(self, stage: str, partition: str) -> Path:
        return self.root / "manifests" / stage / f"{partition}.json"

    def manifest_dir(self, stage: str) -> Path:
        return self.root / "manifests" / stage

    @property
    def document_pairs_path(self) -> Path:
        """The pairs a documents source built from its documents (JSONL), before they are imported."""
        return self.root / "documents" / "pairs.jsonl"

    @property
    def document_pairs_record(self) -> Path:
        """What built them: the documents' digest, the config's hash, the counts."""
        return self.root / "documents" / "pairs.json"

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.duckdb"

    @property
    def onnx_cache_dir(self) -> Path:
        """The filter model's ONNX exports (``filter.backend``), one folder per model fingerprint and kind."""
        return self.root / "cache" / "onnx"

    @property
    def results_dir(self) -> Path:
        """Prefect's persisted task results: kept with the data they describe."""
        return self.root / ".prefect-results"
