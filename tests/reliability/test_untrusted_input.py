"""Untrusted input at the edge of a data root: a hostile mirror listing, a pairs file with a huge or
non-UTF-8 line, a YAML boolean where a number belongs, a moved data root, and a filter that
leaves nothing. Each is refused or counted with a message that names it; nothing lands outside
the data root."""

import json
import logging
import shutil
import urllib.parse

import pytest
import yaml
from builders import article, pubmed_xml, stage1_config, tiny_bert, write_xml
from pydantic import ValidationError

from mosaic_core.config import FilterConfig, PipelineConfig, StageConfig
from storage.examples import examples_file, map_examples, skipped_rows
from storage.layout import DataLayout
from storage.manifest import Manifest, read_manifest, write_manifest
from storage.pairs_io import (
    MAX_LINE_BYTES,
    CorpusError,
    check_pairs_source,
    list_pair_partitions,
    read_pair_partition,
)
from storage.sources import SourceError, SourceFile, fetch, list_source

ABS = ("We studied a large cohort of patients with the disease over several years and report that "
       "the new treatment reduced the rate of the primary outcome compared with standard care in "
       "every subgroup that was examined.")


def files_under(folder, *skip):
    return {p for p in folder.rglob("*") if p.is_file() and not any(s == p or s in p.parents for s in skip)}


# -- 1. a mirror listing cannot write outside raw/ ----------------------------------------------

@pytest.fixture(params=["with a backslash name", "without"])
def hostile_mirror(tmp_path, http_mirror, request):
    """baseline/ lists one real file and hrefs that decode to ../, an absolute path and (first
    param) a backslash; the escaping file is served too, so following the listing would write it."""
    base, mirror, _ = http_mirror
    baseline = mirror / "pubmed" / "baseline"
    write_xml(baseline / "pubmed26n0001.xml.gz",
              pubmed_xml([article(p, title=f"Article number {p} about outcomes", abstract=ABS) for p in (1, 2)]),
              md5_sidecar=True)
    write_xml(mirror / "escaped.xml.gz", pubmed_xml([article(9)]), md5_sidecar=True)
    absolute = urllib.parse.quote(str(tmp_path / "absolute.xml.gz"), safe="")
    hrefs = ["../", "pubmed26n0001.xml.gz", "pubmed26n0001.xml.gz.md5", "..%2F..%2F..%2Fescaped.xml.gz",
             "..%2F..%2F..%2Fescaped.xml.gz.md5", absolute, "%2Ftmp%2Fx.xml.gz"]
    if request.param == "with a backslash name":
        hrefs.append("..%5C..%5Cbackslash.xml.gz")
    (baseline / "index.html").write_text("<html><body>" + "".join(f'<a href="{h}">{h}</a>' for h in hrefs)
                                         + "</body></html>")
    return base


def test_a_hostile_listing_is_skipped_by_name_and_only_pubmed_files_are_fetched(tmp_path, hostile_mirror, caplog):
    with caplog.at_level(logging.WARNING, logger="storage.sources"):
        files = list_source(hostile_mirror, ("baseline",))
    assert [f.name for f in files] == ["pubmed26n0001.xml.gz"]
    warning = caplog.text
    skipped = ["../../../escaped.xml.gz", "/tmp/x.xml.gz", str(tmp_path / "absolute.xml.gz")]
    if "backslash.xml.gz" in (tmp_path / "mirror" / "pubmed" / "baseline" / "index.html").read_text():
        skipped.append("..\\..\\backslash.xml.gz")
    assert f"skipped {len(skipped)} listed file(s) that are not PubMed file names" in warning
    for name in skipped:
        assert repr(name) in warning, name


@pytest.mark.usefixtures("prefect_harness")
def test_ingesting_a_hostile_mirror_writes_nothing_outside_the_data_root(tmp_path, hostile_mirror):
    from flows.ingest import ingest_flow
    from mosaic_core.config import IngestConfig

    root = tmp_path / "data" / "root"
    before = files_under(tmp_path, tmp_path / "mirror")
    try:
        ingest_flow(IngestConfig(source=hostile_mirror, subsets=("baseline",)), str(root), progress=False)
        failed = None
    except Exception as exc:  # noqa: BLE001 (what was written is checked first)
        failed = exc
    assert files_under(tmp_path, tmp_path / "mirror", root) == before  # nothing beside or above the root
    assert failed is None
    assert not (tmp_path / "absolute.xml.gz").exists() and not (tmp_path / "escaped.xml.gz").exists()
    layout = DataLayout(root)
    assert sorted(p.name for p in layout.raw_dir.rglob("*") if p.is_file()) == ["pubmed26n0001.xml.gz"]
    m = read_manifest(layout, "ingest", "pubmed26n0001")
    assert m.status == "complete" and m.kept == 2


@pytest.mark.parametrize("name, subset", [("../../escaped.xml.gz", "baseline"), ("/tmp/x.xml.gz", "baseline"),
                                          ("pubmed26n0001.xml.gz", "../..")])
def test_fetch_refuses_a_destination_outside_raw(tmp_path, hostile_mirror, name, subset):
    layout = DataLayout(tmp_path / "root")
    source = SourceFile(name, hostile_mirror + "baseline/pubmed26n0001.xml.gz", subset)
    with pytest.raises(SourceError, match="refusing to write") as info:
        fetch(source, layout)
    assert repr(name) in str(info.value)
    assert not (tmp_path / "root").exists() or not files_under(tmp_path / "root")


# -- 2. a huge or non-UTF-8 JSONL line costs that line, counted and named -----------------------

@pytest.fixture
def unruly_pairs(tmp_path):
    path = tmp_path / "pairs.jsonl"
    huge = json.dumps({"query": "huge", "document": "x" * (2 * MAX_LINE_BYTES)}).encode()
    lines = [huge,  # first: the column check must look past it
             json.dumps({"query": "first title", "document": "first abstract"}).encode(),
             b'{"query": "caf\xe9 latin-1", "document": "not utf-8"}',
             json.dumps({"query": "second title", "document": "second abstract"}).encode(),
             b"{not json",
             json.dumps({"query": "third title", "document": "caf\u00e9 in utf-8"}, ensure_ascii=False).encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_long_and_non_utf8_lines_are_counted_by_reason_and_logged(unruly_pairs, caplog):
    assert check_pairs_source(str(unruly_pairs), ("query", "document")) == unruly_pairs
    (part,) = list_pair_partitions(str(unruly_pairs))
    with caplog.at_level(logging.WARNING, logger="storage.pairs_io"):
        rows = read_pair_partition(part)
    assert rows.queries == ["first title", "second title", "third title"]
    assert rows.documents[-1] == "caf\u00e9 in utf-8"
    assert rows.bad == {"invalid_json": 1, "too_long": 1, "not_utf8": 1, "missing_query": 0, "missing_document": 0}
    assert f"{unruly_pairs}: skipped 1 line(s) longer than {MAX_LINE_BYTES:,} bytes (too_long: line 1)" in caplog.text
    assert f"{unruly_pairs}: skipped 1 line(s) not valid UTF-8 (not_utf8: line 3)" in caplog.text
    examples = examples_file(str(unruly_pairs), "query", "document", unruly_pairs.parent / "work")
    assert map_examples(examples).column("query").to_pylist() == ["first title", "second title", "third title"]
    assert skipped_rows(examples) == 3


def test_a_line_exactly_at_the_bound_is_read_and_one_byte_more_is_not(tmp_path):
    path = tmp_path / "edge.jsonl"
    head = json.dumps({"query": "edge", "document": ""})[:-2]
    at_bound = (head + "x" * (MAX_LINE_BYTES - len(head) - 2) + '"}').encode()
    assert len(at_bound) == MAX_LINE_BYTES
    over = at_bound[:-2] + b'y"}'
    path.write_bytes(at_bound + b"\n" + over + b"\n" + at_bound)  # the last line has no newline
    (part,) = list_pair_partitions(str(path))
    rows = read_pair_partition(part)
    assert rows.queries == ["edge", "edge"] and rows.bad["too_long"] == 1


# -- 3. a YAML boolean is not a number ----------------------------------------------------------

def test_a_yaml_boolean_is_refused_where_a_number_belongs():
    with pytest.raises(ValidationError, match=r"filter\.k\n.*k must be a number, not the boolean True"):
        PipelineConfig.load(yaml.safe_load("filter:\n  k: true\n"))
    with pytest.raises(ValidationError, match=r"train\.merge_weights"):
        PipelineConfig.load(yaml.safe_load("train:\n  merge_weights: [0.5, yes]\n"))
    with pytest.raises(ValidationError, match=r"threshold"):
        FilterConfig(mode="threshold", threshold=False)
    cfg = PipelineConfig.load(yaml.safe_load(
        "filter:\n  k: 2\nsource:\n  subsets: [baseline]\ntrain:\n  merge_weights: [1]\n"
        "  stages:\n    - {name: joint, kind: joint, lr: 1, symmetric: true}\n"))
    assert cfg.filter.k == 2 and cfg.source.subsets == ("baseline",) and cfg.train.merge_weights == (1.0,)
    stage = cfg.train.stages[0]
    assert stage.lr == 1.0 and isinstance(stage.lr, float) and stage.symmetric is True


# -- 4. a stage record survives moving its data root --------------------------------------------

def test_a_stage_record_follows_its_moved_root(tmp_path):
    from mosaic_core.modeling.card import lineage
    from mosaic_core.modeling.modeldir import read_stage_record, write_stage_record
    from mosaic_core.trainer import Hooks, train_stage
    from mosaic_core.vocab.build import build_expanded_model

    pairs = [(f"cardiomyopathy in the patient {i}", f"the patient with cardiomyopathy was treated {i}")
             for i in range(8)]
    models = tmp_path / "old" / "models"
    build_expanded_model([t for p in pairs for t in p] * 3, models / "stage1",
                         stage1_config(tiny_bert(tmp_path / "base"), vocab_size=300))
    train_stage(str(models / "stage1"), pairs, StageConfig(name="joint", kind="joint", batch_size=4, max_steps=1,
                                                           precision="fp32"),
                models / "1-joint", hooks=Hooks(progress=False))
    raw = json.loads((models / "1-joint" / "stage.json").read_text())
    assert raw["input_model"] == "../stage1" and raw["result"]["out_dir"] == "."

    shutil.move(tmp_path / "old", tmp_path / "new")
    moved = tmp_path / "new" / "models"
    record = read_stage_record(moved / "1-joint")
    assert record["input_model"] == str((moved / "stage1").resolve())
    assert record["result"]["out_dir"] == str((moved / "1-joint").resolve())
    vocab, stages = lineage(str(moved / "1-joint"))
    assert vocab is not None and len(stages) == 1  # the card still finds stage 1

    elsewhere = tmp_path / "elsewhere" / "model"
    write_stage_record(moved / "1-joint", {"input_model": "thenlper/gte-base", "start_model": str(elsewhere),
                                           "result": {"out_dir": str(moved / "1-joint")}})
    raw = json.loads((moved / "1-joint" / "stage.json").read_text())
    assert raw["input_model"] == "thenlper/gte-base" and raw["start_model"] == str(elsewhere)
    assert read_stage_record(moved / "1-joint")["input_model"] == "thenlper/gte-base"


# -- 5. a filter that keeps nothing says so -----------------------------------------------------

@pytest.mark.usefixtures("prefect_harness")
def test_a_filter_that_keeps_no_pair_is_a_clear_input_error(unruly_pairs, tmp_path):
    from flows.filter import filter_flow

    root = str(tmp_path / "root")
    cfg = FilterConfig(model=str(tiny_bert(tmp_path / "model")), mode="threshold", threshold=1.0, precision="fp32")
    with pytest.raises(CorpusError, match="no pairs left after the filters") as info:
        filter_flow(str(unruly_pairs), cfg, root)
    message = str(info.value)
    for phrase in ("below_threshold: 3", "too_long: 1", "not_utf8: 1", "invalid_json: 1", "--threshold (now 1.0)",
                   "check the input"):
        assert phrase in message, message
    m = read_manifest(DataLayout(root), "filter", "pairs")
    assert (m.kept, m.dropped["too_long"], m.dropped["not_utf8"]) == (0, 1, 1)  # counted where bad rows are

    (m,) = filter_flow(str(unruly_pairs), cfg.model_copy(update={"threshold": -1.0}), root)
    assert m.kept == 3


def test_nothing_left_is_only_raised_when_every_partition_kept_nothing(tmp_path, monkeypatch):
    from storage.pairs_io import PairPartition
    from tasks import filter as filter_tasks

    layout, cfg = DataLayout(tmp_path / "root"), FilterConfig(k=3)
    parts = [PairPartition(f"pubmed26n000{i}", str(tmp_path / "root"), f"md5-{i}", 10) for i in (1, 2)]
    monkeypatch.setattr(filter_tasks, "list_pair_partitions", lambda *a: parts)

    def manifest(part, kept, config_hash=None):
        write_manifest(layout, Manifest(
            stage="filter", partition=part.name, source=part.source, source_md5=part.checksum, file_seq=-1,
            config_hash=config_hash or cfg.config_hash(), code_version="x", status="complete", records_in=10,
            rows_out=10, kept=kept, dropped={"inconsistent": 10 - kept}, outputs=[], started_at="2026-01-01T00:00:00Z"))

    manifest(parts[0], 0)
    filter_tasks.require_pairs_left(layout, cfg, parts[0].source)  # the other partition is not filtered yet
    manifest(parts[1], 0, config_hash="an earlier k")
    filter_tasks.require_pairs_left(layout, cfg, parts[0].source)  # ... nor with this config
    manifest(parts[1], 4)
    filter_tasks.require_pairs_left(layout, cfg, parts[0].source)  # it kept some
    manifest(parts[1], 0)
    with pytest.raises(CorpusError, match=r"no pairs left .* 20 rows in 2 partition\(s\) .*inconsistent: 20.*"
                                          r"raise --k \(now 3"):
        filter_tasks.require_pairs_left(layout, cfg, parts[0].source)
