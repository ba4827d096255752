"""Explicit pyarrow schemas of every dataset MOSAIC writes."""

from __future__ import annotations

import pyarrow as pa

_str_list = pa.list_(pa.string())

CITATIONS = pa.schema(
    [
        pa.field("pmid", pa.int64(), nullable=False),
        pa.field("version", pa.int16(), nullable=False),
        pa.field("file_seq", pa.int64(), nullable=False),
        pa.field("record_index", pa.int32(), nullable=False),
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("abstract_sections", _str_list),
        pa.field("abstract_labels", _str_list),
        pa.field("journal", pa.string()),
        pa.field("keywords", _str_list),
        pa.field("mesh_headings", _str_list),
        pa.field("publication_types", _str_list),
        pa.field("languages", _str_list),
        pa.field("vernacular_title", pa.string()),
        pa.field("pub_date", pa.string()),
        pa.field("pub_year", pa.int16()),
        pa.field("title_translated", pa.bool_()),
        pa.field("detected_language", pa.string()),
        pa.field("query", pa.string()),
        pa.field("document", pa.string()),
        pa.field("drop_reason", pa.string()),
    ],
    metadata={"dataset": "citations", "schema_version": "1"},
)
"""One row per parsed citation of a source file; ``drop_reason`` is null for kept pairs."""

DELETIONS = pa.schema(
    [
        pa.field("pmid", pa.int64(), nullable=False),
        pa.field("file_seq", pa.int64(), nullable=False),
        pa.field("source_file", pa.string(), nullable=False),
    ],
    metadata={"dataset": "deletions", "schema_version": "1"},
)
"""PMIDs a source file's ``<DeleteCitation>`` removes."""

FILTERED = pa.schema(
    [
        pa.field("pair_id", pa.string(), nullable=False),
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("query", pa.string(), nullable=False),
        pa.field("document", pa.string(), nullable=False),
        pa.field("kept", pa.bool_(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("cosine", pa.float32(), nullable=False),
        pa.field("chunk", pa.int32(), nullable=False),
        pa.field("negatives", pa.list_(pa.struct([("source_file", pa.string()), ("pair_id", pa.string())]))),
    ],
    metadata={"dataset": "filtered", "schema_version": "2"},
)
"""Every candidate pair with the filter's decision: ``rank`` of its own document among the
chunk's distinct documents (``depth + 1`` = deeper than searched; 0 in threshold mode),
cosine(query, document), and its hard negatives: the rows whose documents the search ranked
highest for its query below its own document (consistency mode; empty in threshold mode)."""
