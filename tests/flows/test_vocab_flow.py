import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from builders import tiny_bert, tiny_encoder

from flows.vocab import vocab_flow
from mosaic_core.config import VocabConfig
from storage.pairs_io import CorpusError, corpus_fingerprint, iter_corpus_texts

pytestmark = pytest.mark.usefixtures("prefect_harness")

PAIRS = [{"query": "Cardiomyopathy in the patient", "document": "Cardiomyopathy and immunotherapy were studied."},
         {"query": "Hepatocytes with immunotherapy", "document": "Hepatocytes and cardiomyocytes were cultured."}] * 30


def test_vocab_flow_from_a_pairs_file_is_cached(tmp_path):
    corpus = tmp_path / "pairs.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    cfg = VocabConfig(base_model=str(tiny_bert(tmp_path / "base")), vocab_size=300, heldout_every=5, min_count=20)
    out = tmp_path / "expanded"
    first = vocab_flow(str(corpus), cfg, str(out))
    assert first["tokens_added"] > 0 and (out / "domain_token_ids.json").exists()
    assert first["corpus"] == {"texts": 120, "sampled": 120}
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    assert vocab_flow(str(corpus), cfg, str(out)) == first  # cached: nothing rebuilt
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime
    (out / "domain_token_ids.json").unlink()  # output gone: rebuilt despite the cache
    vocab_flow(str(corpus), cfg, str(out))
    assert (out / "domain_token_ids.json").exists()


def test_stage1_reads_a_bounded_sample_of_a_larger_corpus(tmp_path):
    corpus = tmp_path / "pairs.jsonl"
    corpus.write_text("".join(json.dumps({k: f"{v} {i}" for k, v in p.items()}) + "\n"
                              for i, p in enumerate(PAIRS)))
    cfg = VocabConfig(base_model=str(tiny_bert(tmp_path / "base")), vocab_size=300, heldout_every=5, min_count=20,
                      init="mean", prune=0.0, sample_texts=100)
    report = vocab_flow(str(corpus), cfg, str(tmp_path / "expanded"))
    assert report["corpus"] == {"texts": 120, "sampled": 100} and report["tokens_added"] > 0
    assert "stage 1 read a sample of 100" in (tmp_path / "expanded" / "vocab_report.md").read_text()


def test_vocab_cli_roberta_with_reduction(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    corpus, reduce = tmp_path / "pairs.jsonl", tmp_path / "general.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    reduce.write_text(json.dumps({"query": "the cells were in a cell", "document": "a patient with cells"}) + "\n")
    base = tiny_encoder(tmp_path / "base", "roberta")
    out = tmp_path / "expanded"
    args = ["vocab", "--corpus", str(corpus), "--out", str(out), "--base-model", str(base), "--vocab-size", "400"]
    result = CliRunner().invoke(app, [*args, "--reduce-to-corpus", str(reduce)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "vocab_report.json").read_text())
    assert report["kind"] == "BPE" and report["tokens_added"] > 0
    assert report["reduction"]["rows_after"] < report["reduction"]["rows_before"] == 320
    assert "fewer" in result.output and "BPE base vocabulary" in result.output
    reduce.write_text(json.dumps({"query": "the cells", "document": "a cell"}) + "\n")  # new content: not cached
    assert CliRunner().invoke(app, [*args, "--reduce-to-corpus", str(reduce)]).exit_code == 0
    assert json.loads((out / "vocab_report.json").read_text())["reduction"] != report["reduction"]
    rows = (out / "model.safetensors").read_bytes()
    assert CliRunner().invoke(app, [*args, "--reduce-to-corpus", str(reduce), "--distill-seed", "1"]).exit_code == 0
    assert (out / "model.safetensors").read_bytes() != rows  # another data order: other distilled rows


def test_corpus_readers(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"query": "a b", "document": "c d"}\n{"query": "", "document": null}\n{broken\n')
    assert list(iter_corpus_texts(str(jsonl))) == ["a b", "c d"]  # the broken line is skipped (and logged)
    with pytest.raises(CorpusError, match="no column"):
        list(iter_corpus_texts(str(jsonl), ("title",)))
    csv = tmp_path / "p.csv"
    csv.write_text("q,d\nx y,z w\n")
    assert list(iter_corpus_texts(str(csv), ("q", "d"))) == ["x y", "z w"]
    with pytest.raises(CorpusError, match="no column"):
        list(iter_corpus_texts(str(csv)))
    with pytest.raises(CorpusError, match="neither"):
        list(iter_corpus_texts(str(tmp_path / "nope")))
    parquet = tmp_path / "p.parquet"
    pq.write_table(pa.table({"query": [f"q{i}" for i in range(10)], "document": [None if i == 3 else f"d{i}"
                                                                               for i in range(10)]}), parquet,
                   row_group_size=4)
    texts = list(iter_corpus_texts(str(parquet)))  # row group by row group, the row's order kept
    assert texts == [t for i in range(10) for t in (f"q{i}", f"d{i}") if t != "d3"]
    assert corpus_fingerprint(str(jsonl)) != corpus_fingerprint(str(csv))
