"""Query and document prompts reach every place a model encodes — the filter's encoder, the
training collator, validation, the evaluation — and the models MOSAIC writes declare them."""

import json

import pytest
import torch
from builders import tiny_bert
from sentence_transformers import SentenceTransformer

from mosaic_core.config import FilterConfig, PipelineConfig, PromptsConfig, StageConfig
from mosaic_core.evaluate.scoring import load_scored_model, retrieval_task, score_task
from mosaic_core.modeling.dual_encoder import PairCollator
from mosaic_core.modeling.encode import Encoder
from mosaic_core.modeling.losses import IGNORE
from mosaic_core.modeling.prompts import ST_CONFIG, Prompts, declare_prompts, declared_prompts
from mosaic_core.trainer import Hooks, train_stage

NOMIC = {"search_query": "search_query: ", "search_document": "search_document: ", "clustering": "clustering: "}


@pytest.fixture(scope="module")
def prompted(tmp_path_factory):
    """A sentence-transformers model whose config declares nomic-style prompts."""
    path = tmp_path_factory.mktemp("prompted")
    SentenceTransformer(str(tiny_bert(tmp_path_factory.mktemp("bert"))), device="cpu").save(str(path))
    config = json.loads((path / ST_CONFIG).read_text())
    (path / ST_CONFIG).write_text(json.dumps({**config, "prompts": NOMIC}))
    return path


class Recorder:
    """Wraps a tokenizer; keeps every text it is asked to tokenise."""

    def __init__(self, tokenizer):
        self.tokenizer, self.texts = tokenizer, []

    def __call__(self, texts, *args, **kwargs):
        self.texts += [texts] if isinstance(texts, str) else list(texts)
        return self.tokenizer(texts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_declared_prompts_are_read_under_any_common_name_and_written_as_query_and_document(prompted, tmp_path):
    assert declared_prompts(prompted) == Prompts("search_query: ", "search_document: ")
    (tmp_path / ST_CONFIG).write_text(json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}}))
    assert declared_prompts(tmp_path) == Prompts("query: ", "passage: ")  # e5's names
    declare_prompts(tmp_path, Prompts("q> ", "d> "))
    assert json.loads((tmp_path / ST_CONFIG).read_text())["prompts"] == {"query": "q> ", "document": "d> "}
    declare_prompts(tmp_path, Prompts())  # trained without: declares none
    assert json.loads((tmp_path / ST_CONFIG).read_text())["prompts"] == {}


def test_the_filter_encoder_prefixes_queries_and_documents(prompted):
    enc = Encoder.load(str(prompted), precision="fp32", device="cpu")
    enc.tokenizer = Recorder(enc.tokenizer)
    enc.encode(["heart attack"], kind="query")
    enc.encode(["an abstract"], kind="document")
    enc.encode(["plain"])
    assert set(enc.tokenizer.texts) == {"search_query: heart attack", "search_document: an abstract", "plain"}
    override = Encoder.load(str(prompted), precision="fp32", device="cpu", prompts=PromptsConfig.model_validate("none"))
    override.tokenizer = Recorder(override.tokenizer)
    override.encode(["heart attack"], kind="query")
    assert set(override.tokenizer.texts) == {"heart attack"}


def test_the_collator_prefixes_every_text_and_never_masks_a_prompt_token(prompted):
    enc = Encoder.load(str(prompted), device="cpu")
    prompts = Prompts("search query ", "search document ")
    collate = PairCollator(enc.tokenizer, None, 32, 32, mlm_probability=1.0, negatives=1, prompts=prompts,
                           generator=torch.Generator().manual_seed(0))
    batch = collate([("heart", "the cells of the patient", "a negative"), ("cell", "the patient was in", "other")])
    decode = lambda ids: enc.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    assert [decode(r) for r in batch["query_ids"]] == ["search query heart", "search query cell"]
    assert [decode(r) for r in batch["neg_ids"]] == ["search document a negative", "search document other"]
    prompt_len = len(enc.tokenizer("search document ", add_special_tokens=False)["input_ids"])
    labels = batch["labels"]
    assert (labels[:, : 1 + prompt_len] == IGNORE).all()  # [CLS] and the prompt: never masked
    assert (labels[:, 1 + prompt_len] != IGNORE).all()  # every other token is (probability 1)


def test_a_stage_trains_with_its_prompts_and_its_model_declares_them(prompted, tmp_path):
    pairs = [(f"cell {i}", f"the patient with cells {i} was in the cell") for i in range(16)]
    cfg = StageConfig(name="c", kind="contrastive", batch_size=8, max_steps=2, lr=1e-4, precision="fp32",
                      prompts=PromptsConfig(query="find ", document="text "))
    seen = []
    original = PairCollator.__call__

    def spy(self, batch, generator=None, margins=None):
        out = original(self, batch, generator, margins)
        seen.extend(self.tokenizer.decode(ids, skip_special_tokens=True) for ids in out["query_ids"])
        return out
    PairCollator.__call__ = spy
    try:
        train_stage(str(prompted), pairs, cfg, tmp_path / "out", hooks=Hooks(progress=False))
    finally:
        PairCollator.__call__ = original
    assert seen and all(s.startswith("find cell") for s in seen)
    assert declared_prompts(tmp_path / "out") == Prompts("find ", "text ")
    model = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert model.prompts["query"] == "find " and "search_query" not in model.prompts
    with_name = model.encode(["cell"], prompt_name="query")
    assert torch.allclose(torch.from_numpy(with_name), torch.from_numpy(model.encode(["find cell"])), atol=1e-6)
    card = (tmp_path / "out" / "README.md").read_text()
    assert 'prompt_name="query"' in card and "'find '" in card


def test_the_evaluation_applies_each_model_s_prompts_or_the_override(prompted, tmp_path, monkeypatch):
    from sentence_transformers.base.model import BaseModel

    received = []
    original = BaseModel.preprocess

    def spy(self, inputs, prompt=None, **kwargs):
        received.extend((prompt or "") + t for t in inputs if isinstance(t, str))
        return original(self, inputs, prompt=prompt, **kwargs)
    monkeypatch.setattr(BaseModel, "preprocess", spy)
    assert load_scored_model(str(prompted)).prompts["query"] == "search_query: "
    corpus = [{"id": "d1", "title": "", "text": "the patient cells"}, {"id": "d2", "title": "", "text": "a cell"}]
    task = retrieval_task("toy", corpus, {"q1": "patient"}, {"q1": {"d1": 1}})
    score_task(str(prompted), task, tmp_path / "w")
    assert "search_query: patient" in received and "search_document: the patient cells" in received
    received.clear()
    task = retrieval_task("toy2", corpus, {"q1": "patient"}, {"q1": {"d1": 1}})
    score_task(str(prompted), task, tmp_path / "w2", prompts={"query": "", "document": ""})
    assert "patient" in received and not any(t.startswith("search_") for t in received)


def test_a_pipeline_prompts_section_reaches_stage_1_every_stage_and_a_filter_on_the_base():
    cfg = PipelineConfig.load({"base_model": "m", "filter": {"model": "m"},
                               "prompts": {"query": "query: ", "document": "passage: "}})
    assert cfg.vocab.prompts == cfg.filter.prompts == cfg.prompts
    assert all(s.prompts == cfg.prompts for s in cfg.train.stages)
    other = PipelineConfig.load({"base_model": "m", "prompts": "none"})
    assert other.filter.prompts is None and other.prompts == PromptsConfig()  # gte-base filters with its own
    plain = FilterConfig(model="m")
    assert plain.encoding_hash() != plain.model_copy(update={"prompts": cfg.prompts}).encoding_hash()  # re-encoded
