"""The DuckDB catalog: SQL views over the Parquet datasets and the manifests of one data root.

Views (refreshed by :meth:`Catalog.refresh`, which every flow calls at its end):

``citations``          every parsed citation of every source file (kept and dropped)
``deletions``          PMIDs removed by ``<DeleteCitation>`` blocks, with the file that removed them
``ingest_manifests``   one row per source file: checksum, config, status, counts
``latest_citations``   the latest version of each PMID across baseline + update files, minus
                       PMIDs deleted by the same or a later file
``latest_pairs``       ``latest_citations`` that passed every ingest filter
``filtered``           every candidate pair with the consistency/threshold decision, rank, cosine
``filter_manifests``   one row per filtered partition: counts kept and dropped
``training_pairs``     ``filtered`` rows that were kept: what training reads
``eval_history``       every score of every evaluation run
``publish_decisions``  one row per pipeline run's publish decision (published or not, and why)
``published_models``   the decisions that published a model: what was published when

"Latest" orders a PMID's rows by (PMID ``Version``, file sequence, record position): NCBI
numbers baseline and update files in one sequence, so a revision in update file 1300
supersedes the baseline record in file 0001, and a later duplicate in the same file wins.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from storage import schemas
from storage.layout import DataLayout

log = logging.getLogger(__name__)

_EVAL_COLUMNS = {
    "run_id": "VARCHAR",
    "evaluated_at": "TIMESTAMPTZ",
    "model": "VARCHAR",
    "model_path": "VARCHAR",
    "model_fingerprint": "VARCHAR",
    "task": "VARCHAR",
    "task_checksum": "VARCHAR",
    "metric": "VARCHAR",
    "value": "DOUBLE",
}
_DECISION_COLUMNS = {
    "run_id": "VARCHAR",
    "decided_at": "TIMESTAMPTZ",
    "candidate": "VARCHAR",
    "candidate_fingerprint": "VARCHAR",
    "published": "BOOLEAN",
    "forced": "BOOLEAN",
    "published_path": "VARCHAR",
    "previous": "VARCHAR",
    "message": "VARCHAR",
    "scores": "MAP(VARCHAR, DOUBLE)",
    "recipe": "STRUCT(model VARCHAR, recipe VARCHAR, difference DOUBLE, low DOUBLE, high DOUBLE, message VARCHAR)",
}
_MANIFEST_COLUMNS = {
    "stage": "VARCHAR",
    "partition": "VARCHAR",
    "source": "VARCHAR",
    "source_md5": "VARCHAR",
    "file_seq": "BIGINT",
    "config_hash": "VARCHAR",
    "code_version": "VARCHAR",
    "status": "VARCHAR",
    "error": "VARCHAR",
    "records_in": "BIGINT",
    "rows_out": "BIGINT",
    "kept": "BIGINT",
    "dropped": "MAP(VARCHAR, BIGINT)",
    "deleted_pmids": "BIGINT",
    "chunk": "BIGINT",
    "notes": "VARCHAR[]",
    "outputs": "VARCHAR[]",
    "started_at": "TIMESTAMPTZ",
    "finished_at": "TIMESTAMPTZ",
}


_LOCK = threading.RLock()


def _literal(value: str) -> str:
    """A SQL string literal. Only for paths derived from DataLayout: DuckDB takes no
    parameters in DDL, and views must name their files."""
    return "'" + value.replace("'", "''") + "'"


def _file_list(files: Sequence[Path]) -> str:
    """The files as a list literal: each path read as it is, never as a glob pattern (a data
    root whose path holds ``[``, ``*`` or ``?`` would match nothing, or the wrong files)."""
    return "[" + ", ".join(_literal(str(f)) for f in files) + "]"


def _whole(path: Path) -> bool:
    """Whether the Parquet file ``path``'s footer reads; a damaged one is left out of the views
    with one warning (the step that wrote it makes it again on its next run)."""
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        log.warning("%s is damaged (%s): left out; rerun the step that wrote it to make it again", path, exc)
        return False
    return True


def _whole_json(path: Path) -> bool:
    """Whether the record ``path`` parses; a damaged one is left out of the views with one warning."""
    try:
        json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        log.warning("%s is damaged (%s): left out of the catalog", path, exc)
        return False
    return True


class Catalog:
    """``Catalog(layout)``: open (read-only by default) the DuckDB catalog of a data root."""

    def __init__(self, layout: DataLayout, read_only: bool = False):
        self.layout = layout
        layout.root.mkdir(parents=True, exist_ok=True)
        # Tasks of one flow run in threads; DuckDB rejects concurrent view DDL on one file.
        _LOCK.acquire()
        try:
            self.con = duckdb.connect(str(layout.catalog_path), read_only=read_only)
        except BaseException:
            _LOCK.release()
            raise

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            _LOCK.release()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building -------------------------------------------------------------------------
    def refresh(self) -> None:
        """(Re)create every view over what is on disk now."""
        self._parquet_view("citations", "citations", schemas.CITATIONS)
        self._parquet_view("deletions", "deletions", schemas.DELETIONS)
        self._parquet_view("filtered", "filtered", schemas.FILTERED)
        self._manifest_view("ingest_manifests", "ingest")
        self._manifest_view("filter_manifests", "filter")
        self._json_view("eval_history", self.layout.evaluations_dir, _EVAL_COLUMNS)
        self._json_view("publish_decisions", self.layout.decisions_dir, _DECISION_COLUMNS)
        self.con.execute("CREATE OR REPLACE VIEW published_models AS SELECT * FROM publish_decisions WHERE published")
        self.con.execute("CREATE OR REPLACE VIEW training_pairs AS SELECT * FROM filtered WHERE kept")
        self.con.execute(
            """
            CREATE OR REPLACE VIEW latest_citations AS
            WITH latest AS (
                SELECT * FROM citations
                QUALIFY row_number() OVER (
                    PARTITION BY pmid
                    ORDER BY version DESC, file_seq DESC, source_file DESC, record_index DESC
                ) = 1
            )
            SELECT l.* FROM latest l
            WHERE NOT EXISTS (
                SELECT 1 FROM deletions d WHERE d.pmid = l.pmid AND d.file_seq >= l.file_seq
            )
            """
        )
        self.con.execute(
            """
            CREATE OR REPLACE VIEW latest_pairs AS
            SELECT pmid, version, source_file, file_seq, query, document, title, journal,
                   keywords, mesh_headings, pub_year
            FROM latest_citations WHERE drop_reason IS NULL
            """
        )

    def _parquet_view(self, view: str, dataset: str, schema: pa.Schema) -> None:
        files = [f for f in sorted(self.layout.dataset_dir(dataset).glob("source=*/part.parquet")) if _whole(f)]
        if files:
            self.con.execute(
                f"CREATE OR REPLACE VIEW {view} AS SELECT * EXCLUDE (source) FROM "
                f"read_parquet({_file_list(files)}, hive_partitioning = true, union_by_name = true)"
            )
        else:  # no partitions yet: an empty relation with the right columns
            empty = schema.empty_table()  # noqa: F841 (read by DuckDB's replacement scan)
            self.con.execute(f"DROP VIEW IF EXISTS {view}")
            self.con.execute(f"CREATE OR REPLACE TABLE {view}_empty AS SELECT * FROM empty")
            self.con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {view}_empty")

    def _manifest_view(self, view: str, stage: str) -> None:
        self._json_view(view, self.layout.manifest_dir(stage), _MANIFEST_COLUMNS)

    def _json_view(self, view: str, directory: Path, column_types: dict[str, str]) -> None:
        columns = "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in column_types.items()) + "}"
        files = [f for f in sorted(directory.glob("*.json")) if _whole_json(f)]
        if files:
            source = f"read_json({_file_list(files)}, columns = {columns})"
        else:
            cols = ", ".join(f"NULL::{t} AS {k}" for k, t in column_types.items())
            source = f"(SELECT {cols} WHERE false)"
        self.con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {source}")

    # -- reading --------------------------------------------------------------------------
    def rows(self, sql: str, params: Sequence | None = None) -> list[tuple]:
        return self.con.execute(sql, params or []).fetchall()

    def training_examples(self, batch_rows: int) -> pa.RecordBatchReader:
        """The data root's training examples as record batches of ``query``, ``document`` and
        ``negatives`` (row numbers in this result), streamed: once the filter has run, its kept
        pairs by (source file, pair id), each with the documents of the rows the filter recorded as
        its hard negatives (best first); a dropped pair's document that is a negative follows the
        pairs as a row without a query. Before the filter: ``latest_pairs`` by (file, PMID), no
        negatives. DuckDB sorts within a 1 GB memory limit, spilling beyond it."""
        self.con.execute("SET memory_limit = '1GB'")
        if not self.layout.manifest_dir("filter").is_dir():
            return self.con.sql("SELECT query, document, []::BIGINT[] AS negatives FROM latest_pairs "
                                "ORDER BY file_seq, pmid").to_arrow_reader(batch_rows)
        return self.con.sql(
            """
            WITH kept AS (
                SELECT source_file, pair_id, query, document, negatives,
                       row_number() OVER (ORDER BY source_file, pair_id) - 1 AS row
                FROM training_pairs
            ), refs AS (
                SELECT row AS owner, unnest(negatives) AS ref, generate_subscripts(negatives, 1) AS pos
                FROM kept WHERE len(negatives) > 0
            ), extra AS (
                SELECT f.source_file, f.pair_id, f.document,
                       (SELECT count(*) FROM kept) + row_number() OVER (ORDER BY f.source_file, f.pair_id) - 1 AS row
                FROM filtered f
                WHERE NOT f.kept AND EXISTS (SELECT 1 FROM refs r WHERE r.ref.source_file = f.source_file
                                                                     AND r.ref.pair_id = f.pair_id)
            ), ids AS (
                SELECT source_file, pair_id, row FROM kept UNION ALL SELECT source_file, pair_id, row FROM extra
            ), negs AS (
                SELECT r.owner, list(i.row ORDER BY r.pos) AS negatives
                FROM refs r JOIN ids i ON i.source_file = r.ref.source_file AND i.pair_id = r.ref.pair_id
                GROUP BY r.owner
            )
            SELECT query, document, negatives FROM (
                SELECT k.row, k.query, k.document, coalesce(n.negatives, []::BIGINT[]) AS negatives
                FROM kept k LEFT JOIN negs n ON n.owner = k.row
                UNION ALL
                SELECT row, NULL, document, []::BIGINT[] FROM extra
            ) ORDER BY row
            """
        ).to_arrow_reader(batch_rows)

    def cosines(self):
        """cosine(query, document) of every filtered pair, as a float32 array."""
        return self.con.execute("SELECT cosine FROM filtered").fetchnumpy()["cosine"]

    def dropped_examples(self, n: int) -> list[tuple]:
        """(pair id, cosine, query, document) of the ``n`` dropped pairs with the highest cosine."""
        return self.rows("SELECT pair_id, cosine, query, document FROM filtered WHERE NOT kept "
                         "ORDER BY cosine DESC LIMIT ?", [n])

    def eval_history(self, last: int, task: str | None = None) -> list[tuple]:
        """(evaluated_at, run_id, model, task, metric, value, model_fingerprint) of the ``last``
        evaluation runs, newest first, optionally of one task."""
        return self.rows(
            """
            WITH runs AS (SELECT run_id, max(evaluated_at) AS run_at FROM eval_history GROUP BY run_id
                          ORDER BY run_at DESC LIMIT ?)
            SELECT h.evaluated_at, h.run_id, h.model, h.task, h.metric, h.value, h.model_fingerprint
            FROM eval_history h JOIN runs USING (run_id)
            WHERE ? IS NULL OR h.task = ? ORDER BY h.evaluated_at DESC, h.task, h.model
            """, [last, task, task])

    def decisions(self, last: int) -> list[tuple]:
        """(decided_at, run_id, published, forced, candidate, published_path, message, recipe) of
        the ``last`` publish decisions, newest first (recipe: ``adapted`` or ``control``, None
        for a run without a control)."""
        return self.rows(
            "SELECT decided_at, run_id, published, forced, candidate, published_path, message, recipe.recipe "
            "FROM publish_decisions ORDER BY decided_at DESC LIMIT ?", [last])

    def file_stats(self) -> list[tuple]:
        """(partition, status, records_in, kept, dropped, deleted, error) per ingested file."""
        return self.rows(
            """
            SELECT partition, status, records_in, kept, records_in - kept AS dropped,
                   deleted_pmids, error
            FROM ingest_manifests ORDER BY file_seq, partition
            """
        )

    def drop_reasons(self) -> list[tuple]:
        """(reason, count) over all files, largest first; zero counts left out."""
        return self.rows(
            """
            SELECT reason, sum(n)::BIGINT AS n FROM (
                SELECT unnest(map_keys(dropped)) AS reason, unnest(map_values(dropped)) AS n
                FROM ingest_manifests
            ) GROUP BY reason HAVING sum(n) > 0 ORDER BY n DESC, reason
            """
        )

    def totals(self) -> dict[str, int]:
        (citations, pairs_all) = self.rows(
            "SELECT count(*), count(*) FILTER (WHERE drop_reason IS NULL) FROM citations"
        )[0]
        (latest,) = self.rows("SELECT count(*) FROM latest_citations")[0]
        (latest_pairs,) = self.rows("SELECT count(*) FROM latest_pairs")[0]
        (deleted,) = self.rows("SELECT count(DISTINCT pmid) FROM deletions")[0]
        return {
            "citation_rows": citations,
            "kept_rows": pairs_all,
            "latest_citations": latest,
            "latest_pairs": latest_pairs,
            "deleted_pmids": deleted,
        }


def refresh_catalog(layout: DataLayout) -> Path:
    """Rebuild the catalog views of ``layout``; returns the catalog's path."""
    with Catalog(layout) as cat:
        cat.refresh()
    return layout.catalog_path
