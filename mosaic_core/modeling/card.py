"""The model card every model the pipeline writes carries (``README.md``, Hugging Face
conventions): YAML metadata, then what the model is, how it was made, how to use it, how it
scores next to its base, and its limits. Built from the files the pipeline writes beside the
model (:mod:`mosaic_core.modeling.modeldir`); the base model's own card is never copied."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mosaic_core.modeling.modeldir import read_stage_record, read_vocab_report
from mosaic_core.modeling.prompts import Prompts, declared_prompts
from mosaic_core.modeling.refs import OFFLINE_MODEL

HUB_NAMES = {OFFLINE_MODEL: "sentence-transformers/all-MiniLM-L6-v2"}
"""Offline aliases → the hub model they are a copy of (what ``base_model`` names on the hub)."""


@dataclass
class CardFacts:
    """What a card says, gathered from a model directory and the stages before it."""

    name: str
    base_model: str
    domain: str
    vocab: dict | None = None
    stages: list[dict] = field(default_factory=list)
    scores: dict[str, dict] = field(default_factory=dict)
    """task → {"metric", "value", "base"}: the model's main score and its base's, 0–1; and "dim" for a
    score of embeddings cut to that many dimensions (``mosaic eval --dims``, task named TASK@DIM)."""
    datasets: list[str] = field(default_factory=list)
    prompts: Prompts = field(default_factory=Prompts)
    """The query and document prompts the model declares (and was trained with)."""


def lineage(model_dir: str) -> tuple[dict | None, list[dict]]:
    """(stage 1's report, the stage records from stage 1 to ``model_dir``), following each
    stage's ``input_model``."""
    stages, path = [], model_dir
    while (record := read_stage_record(path)) is not None:
        stages.append(record)
        path = record["input_model"]
    return read_vocab_report(path), list(reversed(stages))


def facts(model_dir: str, domain: str, scores: dict[str, dict] | None = None, datasets: list[str] | None = None,
          ) -> CardFacts:
    vocab, stages = lineage(model_dir)
    base = (vocab or {}).get("base_model") or (stages[0]["input_model"] if stages else "unknown")
    return CardFacts(Path(model_dir).name, HUB_NAMES.get(base, base), domain, vocab, stages, scores or {},
                     datasets or [], declared_prompts(model_dir))


def _metadata(f: CardFacts) -> dict:
    meta = {"base_model": f.base_model, "library_name": "sentence-transformers",
            "pipeline_tag": "sentence-similarity",
            "tags": ["sentence-transformers", "feature-extraction", "mosaic", "domain-adaptation", f.domain]}
    if f.datasets:
        meta["datasets"] = f.datasets
    if f.scores:
        meta["model-index"] = [{"name": f.name, "results": [
            {"task": {"type": "retrieval" if s["metric"].startswith(("ndcg", "map", "recall")) else "sts"},
             "dataset": {"name": task, "type": task},
             "metrics": [{"type": s["metric"], "value": round(s["value"], 6)}]} for task, s in f.scores.items()]}]
    return meta


def _vocab_section(v: dict | None) -> list[str]:
    if not v:
        return ["The vocabulary is the base model's."]
    examples = ", ".join(f"`{e['token']}`" for e in v.get("examples", [])[:12])
    drift = v.get("drift") or {}
    return [f"{v['tokens_added']:,} domain tokens were added to the {v['kind']} vocabulary of the base "
            f"({v['base_vocab_size']:,}), those its domain corpus uses at least {v['min_count']} times "
            f"({examples}, …): held-out words take {v['fertility_before']:.2f} → {v['fertility_after']:.2f} pieces "
            f"each. New rows: " + ("the mean of their pieces, then distilled so the model reproduces the base's "
                                   "embeddings" if v.get("init") == "distill" else "the mean of their pieces")
            + (f" (mean cosine to the base embedding of held-out domain text: {drift['mean_cos']:.3f})."
               if drift else ".")]


def _stage_rows(stages: list[dict]) -> list[str]:
    rows = ["| stage | kind | steps | batch | lr | MLM α | hard negatives | kept step |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in stages:
        c, r = s["config"], s["result"]
        if r.get("stage") == "merge":
            rows.append(f"| merge | WiSE-FT with stage 1, weight {r['merge_weight']:g} | | | | | | |")
            continue
        alpha = c["alpha"] if c["kind"] == "joint" else "–"
        kept = r.get("best_step") if r.get("best_step") is not None else r["steps"]
        rows.append(f"| {c['name']} | {c['kind']} | {r['steps']} | {c['batch_size']} | {c['lr']:g} | {alpha} | "
                    f"{c.get('hard_negatives', 0)} | {kept} |")
    return rows


def _dims_rows(scores: dict[str, dict]) -> list[str]:
    """Task × dimension (this model, ×100) of the scores of cut embeddings; none without any."""
    cut = {t: s for t, s in scores.items() if s.get("dim") is not None}
    if not cut:
        return []
    dims = sorted({s["dim"] for s in cut.values()}, reverse=True)
    tasks: dict[str, dict[int, float]] = {}
    for t, s in cut.items():
        tasks.setdefault(t.removesuffix(f"@{s['dim']}"), {})[s["dim"]] = s["value"]
    return ["### Truncated embeddings", "",
            "The first d dimensions of each embedding, renormalised (`model.encode(..., truncate_dim=d)`, cosine):",
            "", "| task | " + " | ".join(f"{d} d" for d in dims) + " |", "| --- |" + " ---: |" * len(dims),
            *(f"| {t} | " + " | ".join(f"{100 * v[d]:.2f}" if d in v else "–" for d in dims) + " |"
              for t, v in tasks.items()), ""]


def _score_rows(scores: dict[str, dict]) -> list[str]:
    """This model against the base (and the control: plain fine-tuning of the base on the same
    pairs and budget, when the run trained one)."""
    references = ["base", *(["control"] if any("control" in s for s in scores.values()) else [])]
    rows = ["| task | metric | this model | " + " | ".join(f"{r} | Δ" for r in references) + " |",
            "| --- | --- | ---: |" + " ---: | ---: |" * len(references)]
    for task, s in scores.items():
        if s.get("dim") is not None:
            continue  # in the truncated-embeddings table
        cells = [f"{100 * s[r]:.2f} | {100 * (s['value'] - s[r]):+.2f}" if s.get(r) is not None else "– | –"
                 for r in references]
        rows.append(f"| {task} | {s['metric']} | {100 * s['value']:.2f} | " + " | ".join(cells) + " |")
    return rows


def _usage(prompts: Prompts) -> list[str]:
    if not prompts:
        return ['embeddings = model.encode(["a domain query", "a domain document"], normalize_embeddings=True)']
    named = lambda kind: f', prompt_name="{kind}"' if prompts.prefix(kind) else ""  # noqa: E731
    return [f'queries = model.encode(["a domain query"]{named("query")}, normalize_embeddings=True)',
            f'documents = model.encode(["a domain document"]{named("document")}, normalize_embeddings=True)']


def render(f: CardFacts, usage_path: str | None = None) -> str:
    """The card as Markdown with YAML front matter."""
    usage = usage_path or f.name
    plain = not f.vocab and f.stages and all(s["config"]["kind"] == "contrastive" for s in f.stages)
    lines = ["---", yaml.safe_dump(_metadata(f), sort_keys=False).rstrip(), "---", "",
             f"# {f.name}: {f.base_model} {'fine-tuned on' if plain else 'adapted to'} {f.domain}", "",
             f"A sentence-embedding model made by MOSAIC from `{f.base_model}`: " + (
                 "plain contrastive fine-tuning on the domain's (query, document) pairs, with the base's vocabulary "
                 "and no MLM — the control a MOSAIC run trains beside the adapted model, and publishes when the "
                 "adapted model is not ahead of it beyond noise on the validation pairs." if plain else
                 "its vocabulary extended with the domain's words, then trained on the domain's (query, document) "
                 "pairs (domain-restricted MLM + contrastive, then contrastive)."), "",
             "## Domain vocabulary", "", *_vocab_section(f.vocab), ""]
    if f.stages:
        lines += ["## Training", "", *_stage_rows(f.stages), "",
                  f"Pairs seen: {f.stages[-1]['result'].get('pairs', 0):,}. Each stage keeps its best checkpoint on "
                  "validation pairs held out of training.", ""]
    lines += ["## Use", "", "```python", "from sentence_transformers import SentenceTransformer", "",
              f'model = SentenceTransformer("{usage}")', *_usage(f.prompts), "```", ""]
    if f.prompts:
        lines += [f"The model was trained with the prompts {f.prompts.query!r} before queries and "
                  f"{f.prompts.document!r} before documents; `prompt_name` adds them (mteb applies them too).", ""]
    if f.scores:
        lines += ["## Evaluation (main score × 100)", "", *_score_rows(f.scores), "", *_dims_rows(f.scores)]
    lines += ["## Limits", "",
              "- Trained for one domain: outside it, expect the base model's quality at best.",
              "- Scores are on the tasks above only; the held-out pairs come from the same corpus as training.",
              "- Texts are truncated at the training lengths; the model inherits the base model's biases.", ""]
    return "\n".join(lines)
