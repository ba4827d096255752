"""Builders for hand-written PubMed XML and helpers shared by the tests."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_script(path: Path) -> ModuleType:
    """The Python file ``path`` loaded as a module named after it (a script outside any package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_script(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as a module (bench/ is scripts, not a package)."""
    return load_script(BENCH / f"{name}.py")


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data; the test is skipped when it is absent (fresh clones)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


def article(
    pmid: int | str,
    title: str = "A study of something rather interesting in patients",
    abstract: str | list[tuple[str, str]] | None = (
        "We studied something rather interesting in a large group of patients over several years "
        "and found that the effect was both consistent and clinically relevant across all of the "
        "subgroups that were examined in this cohort."
    ),
    *,
    version: int = 1,
    journal: str = "Journal of Tests",
    keywords: tuple[str, ...] = (),
    mesh: tuple[str, ...] = (),
    language: str = "eng",
    vernacular: str | None = None,
    pub_date: str = "<Year>2020</Year><Month>Feb</Month><Day>3</Day>",
    pub_types: tuple[str, ...] = ("Journal Article",),
) -> str:
    """One ``<MedlineCitation>`` element as XML text."""
    if abstract is None:
        abs_xml = ""
    elif isinstance(abstract, str):
        abs_xml = f"<Abstract><AbstractText>{abstract}</AbstractText></Abstract>"
    else:
        abs_xml = "<Abstract>" + "".join(
            f'<AbstractText Label="{label}">{text}</AbstractText>' for label, text in abstract
        ) + "</Abstract>"
    kw = "".join(f"<Keyword>{k}</Keyword>" for k in keywords)
    mh = "".join(f"<MeshHeading><DescriptorName>{m}</DescriptorName></MeshHeading>" for m in mesh)
    pt = "".join(f"<PublicationType>{p}</PublicationType>" for p in pub_types)
    return (
        f'<MedlineCitation Status="MEDLINE" Owner="NLM"><PMID Version="{version}">{pmid}</PMID>'
        f"<Article><Journal><JournalIssue><PubDate>{pub_date}</PubDate></JournalIssue>"
        f"<Title>{journal}</Title></Journal><ArticleTitle>{title}</ArticleTitle>{abs_xml}"
        f'<AuthorList CompleteYN="Y"><Author><LastName>Doe</LastName></Author></AuthorList>'
        f"<Language>{language}</Language><PublicationTypeList>{pt}</PublicationTypeList>"
        + (f"<VernacularTitle>{vernacular}</VernacularTitle>" if vernacular else "")
        + f"</Article><MeshHeadingList>{mh}</MeshHeadingList>"
        + (f"<KeywordList>{kw}</KeywordList>" if kw else "")
        + "</MedlineCitation>"
    )


def pubmed_xml(citations: list[str], deleted: tuple[int, ...] = (), shape: str = "pubmed") -> str:
    """A whole file in the current (``pubmed``) or older (``medline``) shape."""
    dc = (
        "<DeleteCitation>" + "".join(f'<PMID Version="1">{p}</PMID>' for p in deleted) + "</DeleteCitation>"
        if deleted
        else ""
    )
    if shape == "medline":
        return '<?xml version="1.0"?>\n<MedlineCitationSet>\n' + "\n".join(citations) + dc + "</MedlineCitationSet>\n"
    body = "\n".join(
        f"<PubmedArticle>{c}<PubmedData><History><PubMedPubDate PubStatus=\"pubmed\"><Year>2020</Year>"
        f"</PubMedPubDate></History></PubmedData></PubmedArticle>"
        for c in citations
    )
    return '<?xml version="1.0"?>\n<PubmedArticleSet>\n' + body + dc + "\n</PubmedArticleSet>\n"


def stage1_config(base: Path | str, **kw):
    """Stage 1 for tiny test corpora: every candidate seen at least once, mean-initialised rows,
    none pruned (distillation and pruning have tests of their own)."""
    from mosaic_core.config import VocabConfig

    return VocabConfig(**{"base_model": str(base), "min_count": 1, "init": "mean", "prune": 0.0, **kw})


def write_xml(path: Path, xml: str, md5_sidecar: bool = False) -> Path:
    """Write ``xml`` (gzipped if the name ends in .gz), optionally with an NCBI-style .md5."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = gzip.compress(xml.encode(), mtime=0) if path.name.endswith(".gz") else xml.encode()
    path.write_bytes(data)
    if md5_sidecar:
        Path(str(path) + ".md5").write_text(f"MD5({path.name})= {hashlib.md5(data).hexdigest()}\n")
    return path


TINY_WORDS = ["the", "patient", "cell", "cells", "of", "and", "with", "in", "a", "was", "were", "is", "q"]


def tiny_bert(path: Path, words: list[str] = TINY_WORDS, hidden: int = 32, mlm_head: bool = False) -> Path:
    """A 2-layer, hidden-32 BERT with a small WordPiece vocabulary, saved to ``path``.

    The vocabulary holds the specials, every lowercase letter and digit (word-initial and
    ``##``), and ``words``: enough to render any ASCII word, never a non-Latin one.
    """
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizerFast

    chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + c for c in chars), *words]
    vocab = list(dict.fromkeys(vocab))
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok = BertTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                            cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=128)
    if mlm_head:  # a checkpoint with its own MLM head, its decoder bias made non-trivial
        model = BertForMaskedLM(config)
        with torch.no_grad():
            model.cls.predictions.bias.copy_(torch.randn(len(vocab)))
        model.save_pretrained(path)
    else:
        BertModel(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def tiny_cross_encoder(path: Path, words: list[str] = TINY_WORDS, seed: int = 1) -> Path:
    """A random 2-layer BERT cross-encoder (one relevance logit per pair) with :func:`tiny_bert`'s
    tokenizer, saved to ``path``; initialised wide (std 0.5), so its scores of different pairs differ
    by units, as a trained cross-encoder's logits do, not by the 1e-5 of BERT's default std
    0.02."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tiny_bert(path, words)
    torch.manual_seed(seed)
    config = BertConfig.from_pretrained(path, num_labels=1, initializer_range=0.5)
    BertForSequenceClassification(config).save_pretrained(path)
    return path


BASE_CORPUS = ["the patient was with cells in a cell and the cells of a patient were in the cell",
               "abcdefghijklmnopqrstuvwxyz 0123456789 the of and with in a was were is"] * 30


def tiny_encoder(path: Path, family: str, hidden: int = 32, mlm_head: bool = False) -> Path:
    """A 2-layer, hidden-32 encoder of ``family`` with a small tokenizer of its family's kind:
    ``bert`` (WordPiece, see :func:`tiny_bert`), ``roberta`` (byte-level BPE) or ``xlmr``
    (Unigram with Metaspace, SentencePiece-style). BPE and Unigram tokenizers are trained
    on a few English words: every Latin letter is in the vocabulary, no Cyrillic one is."""
    if family == "bert":
        return tiny_bert(path, hidden=hidden, mlm_head=mlm_head)
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import (
        RobertaConfig,
        RobertaForMaskedLM,
        RobertaModel,
        RobertaTokenizerFast,
        XLMRobertaConfig,
        XLMRobertaForMaskedLM,
        XLMRobertaModel,
        XLMRobertaTokenizerFast,
    )

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    if family == "roberta":
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok_cls, config_cls, mlm_cls, model_cls = (RobertaTokenizerFast, RobertaConfig, RobertaForMaskedLM,
                                                   RobertaModel)
    elif family == "xlmr":
        backend = Tokenizer(models.Unigram())
        backend.normalizer = normalizers.NFKC()
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
        backend.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=120, special_tokens=specials, unk_token="<unk>",
                                          initial_alphabet=list("abcdefghijklmnopqrstuvwxyz0123456789"))
        tok_cls, config_cls, mlm_cls, model_cls = (XLMRobertaTokenizerFast, XLMRobertaConfig, XLMRobertaForMaskedLM,
                                                   XLMRobertaModel)
    else:
        raise ValueError(family)
    backend.train_from_iterator(BASE_CORPUS, trainer)
    backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok = tok_cls(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                  pad_token="<pad>", mask_token="<mask>", cls_token="<s>", sep_token="</s>")
    torch.manual_seed(0)
    config = config_cls(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=130, pad_token_id=1)
    if mlm_head:
        model = mlm_cls(config)
        with torch.no_grad():
            model.lm_head.bias.copy_(torch.randn(len(tok)))
        model.save_pretrained(path)
    else:
        model_cls(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


DRUGS = ["metformin", "aspirin", "statins", "insulin", "ibuprofen", "warfarin", "heparin", "lithium"]
DISEASES = ["diabetes", "asthma", "stroke", "sepsis", "anemia", "obesity", "migraine", "arthritis"]


def varied_articles(first_pmid: int, n: int) -> list[str]:
    """``n`` distinct, filter-passing citations (title and abstract name a drug and a disease)."""
    out = []
    for i in range(n):
        drug, disease = DRUGS[(first_pmid + i) % len(DRUGS)], DISEASES[(first_pmid + i) // len(DRUGS) % len(DISEASES)]
        title = f"Effect of {drug} on {disease} outcomes in cohort {first_pmid + i}"
        abstract = (f"We studied whether {drug} changes the course of {disease} in {40 + i} adult patients "
                    f"followed for {2 + i % 5} years in cohort {first_pmid + i}. Patients given {drug} had "
                    f"fewer {disease} events than controls, and the effect was consistent across subgroups.")
        out.append(article(first_pmid + i, title=title, abstract=abstract))
    return out


def tiny_pipeline_yaml(path: Path, source: str, base_model: str, **extra: object) -> Path:
    """A pipeline YAML that runs end to end in seconds with a tiny model: every pair kept
    (threshold filter at -1), two 2-step training stages, the held-out task only."""
    import yaml

    stage = {"batch_size": 4, "max_steps": 2, "checkpoint_every": 1, "log_every": 1}
    cfg = {"base_model": base_model, "source": {"kind": "pubmed", "source": source},
           "filter": {"model": base_model, "mode": "threshold", "threshold": -1.0},
           "vocab": {"vocab_size": 300, "heldout_every": 5, "min_count": 20},  # a tiny corpus
           "train": {"heldout_pairs": 4, "stages": [{"name": "joint", "kind": "joint", **stage},
                                                    {"name": "contrastive", "kind": "contrastive", **stage}]},
           "eval_pool": 100, **extra}
    path.write_text(yaml.safe_dump(cfg))
    return path
