"""What stage 1 did, as data and as the markdown of ``vocab_report.md``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from mosaic_core.vocab.reduce import ReductionReport


@dataclass
class VocabReport:
    """What stage 1 did, with the numbers a person checks first."""

    base_vocab_size: int
    domain_tokenizer_size: int
    candidates: int
    base_model: str
    tokens_added: int
    skipped_unknown: int
    first_new_id: int
    kind: str = "WordPiece"
    min_count: int = 1
    max_tokens: int | None = None
    rejected: dict[str, int] = field(default_factory=dict)
    rejected_examples: dict[str, list[dict]] = field(default_factory=dict)
    thresholds: list[dict] = field(default_factory=list)
    no_merge_chain: int = 0
    merge_intermediates: int = 0
    examples: list[dict] = field(default_factory=list)
    heldout_words: int = 0
    fertility_before: float = 0.0
    fertility_after: float = 0.0
    single_token_share_before: float = 0.0
    single_token_share_after: float = 0.0
    init: str = "mean"
    distill: dict | None = None
    drift_mean_init: dict | None = None
    drift: dict | None = None
    token_drift: list[dict] | None = None
    pruned: dict | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    reduction: dict | None = None
    corpus: dict | None = None  # {"texts": the corpus's, "sampled": stage 1's sample of them}
    seed: int | None = None
    runtime: dict = field(default_factory=dict)
    glossary: dict | None = None
    """The glossary's one-word names the base splits: added or rejected, their rows' learning."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def to_markdown(self) -> str:
        return "\n".join(["# Vocabulary expansion", "", *self._summary(), "", *self._drift_lines(),
                          *self._threshold_table(), *self._rejected_lines(), *self._example_table()]) + "\n"

    def _corpus_line(self) -> list[str]:
        if not self.corpus:
            return []
        n, k = self.corpus["texts"], self.corpus["sampled"]
        return [f"- corpus: {n:,} texts" + (", all read" if k >= n else
                                             f"; stage 1 read a sample of {k:,} (those with the smallest content "
                                             "hash: `sample_texts`)")]

    def _summary(self) -> list[str]:
        gain = self.fertility_before - self.fertility_after
        lines = [*self._corpus_line(),
            f"- {self.kind} base vocabulary: {self.base_vocab_size:,}; domain tokenizer: "
            f"{self.domain_tokenizer_size:,}; candidates it has that the base lacks: {self.candidates:,} "
            f"(skipped as [UNK]-only: {self.skipped_unknown})",
            f"- tokens added (V_D): **{self.tokens_added:,}** (ids {self.first_new_id:,}–"
            f"{self.first_new_id + self.tokens_added - 1:,}): used at least {self.min_count} times in the corpus"
            + (f", at most {self.max_tokens:,}" if self.max_tokens else "")
            + "; " + ", ".join(f"{n:,} rejected as {r}" for r, n in self.rejected.items() if n),
            f"- held-out words: {self.heldout_words:,}; fertility (pieces/word) {self.fertility_before:.3f} → "
            f"**{self.fertility_after:.3f}** (−{gain:.3f}); single-token words "
            f"{self.single_token_share_before:.1%} → **{self.single_token_share_after:.1%}**",
            "- new rows: mean of their base pieces" + (", then distilled" if self.init == "distill" else "")
            + (f"; the costliest {self.pruned['share']:.0%} pruned" if self.pruned else "")
            + "; time: " + ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items()),
        ]
        if self.runtime:
            lines.append(f"- seed {self.seed}; " + ", ".join(f"{k} {v}" for k, v in self.runtime.items()
                                                              if k != "torch_threads")
                         + f"; {self.runtime.get('torch_threads')} torch threads")
        if self.kind == "BPE":
            lines.append(f"- BPE merges: {self.merge_intermediates:,} of the added tokens are intermediate merge "
                         f"results; {self.no_merge_chain:,} selected tokens left out (every merge chain passed "
                         "through a base token)")
        if self.reduction:
            lines.append(ReductionReport(**self.reduction).to_markdown().rstrip("\n"))
        return lines

    def _drift_lines(self) -> list[str]:
        if not self.drift_mean_init:
            return []
        lines = ["## Drift: cos(base embedding, stage-1 embedding) on held-out texts", "",
                 "| rows | mean | 5th percentile |", "| --- | ---: | ---: |",
                 f"| mean of pieces | {self.drift_mean_init['mean_cos']:.4f} | {self.drift_mean_init['p5_cos']:.4f} |"]
        final = self.drift and (self.init == "distill" or self.pruned)
        if self.pruned and self.pruned["drift_before"]:
            d = self.pruned["drift_before"]
            lines.append(f"| distilled, every selected token | {d['mean_cos']:.4f} | {d['p5_cos']:.4f} |")
        if final:
            name = ("distilled" if self.init == "distill" else "mean of pieces") + (", pruned" if self.pruned else "")
            lines.append(f"| {name} | **{self.drift['mean_cos']:.4f}** | **{self.drift['p5_cos']:.4f}** |")
        lines += ["", f"{self.drift_mean_init['texts']:,} held-out texts, {self.drift_mean_init['changed']:.0%} of "
                  "them hold a new token (the others embed exactly as before)."]
        if self.distill:
            d = self.distill
            on = ("held-out" if d.get("evaluated_on", "held-out") == "held-out"
                  else "no held-out text holds a new token: training-window")
            lines.append(f"Distillation: {d['steps']} steps on {d['windows']:,} windows; {on} loss "
                         f"{d['heldout_loss_before']:.5f} → {d['heldout_loss_after']:.5f} (best at step "
                         f"{d['best_step']}; stopped: {d['stop_reason']}).")
        return [*lines, "", *self._pruned_lines(), *self._token_drift_lines()]

    def _pruned_lines(self) -> list[str]:
        if not self.pruned:
            return []
        p = self.pruned
        rows = [f"| `{t['token']}` | {t['cost']:.4f} | {t['rise']:+.4f} | {t['saved']:.2f} | {t['sentences']} |"
                for t in p["costliest"]]
        return ["### Pruned: the tokens that cost the most per piece saved", "",
                f"Each selected token was read as its base pieces again in up to {p['sentences_per_token']} training "
                f"sentences that hold it ({p['measured']:,} tokens measured); its cost is the mean rise of cos(base, "
                f"stage 1) that gives, per base piece it saves. The costliest {p['share']:.0%} were dropped "
                f"({p['dropped']:,} tokens; {p['settled_out']:,} more fell out when the selection settled again): "
                f"{p['tokens_before']:,} → {self.tokens_added:,} tokens, held-out fertility "
                f"{p['fertility_before']:.3f} → {self.fertility_after:.3f}. The costliest dropped:", "",
                "| token | cost per piece | rise | pieces saved | sentences |", "| --- | ---: | ---: | ---: | ---: |",
                *rows, "", *self._prune_trade_off()]

    def _prune_trade_off(self) -> list[str]:
        p = self.pruned
        if not p.get("trade_off"):
            return []
        gain = self.fertility_before - p["fertility_before"]
        points = [{"share": 0.0, "tokens": p["tokens_before"], "fertility": p["fertility_before"],
                   "drift": p["drift_before"] or self.drift_mean_init}, *p["trade_off"]]
        rows = [f"| {q['share']:.0%}{' (chosen)' if q['share'] == p['share'] else ''} | {q['tokens']:,} | "
                f"{q['fertility']:.3f} | {(self.fertility_before - q['fertility']) / gain if gain else 1:.0%} | "
                f"{q['drift']['mean_cos']:.4f} | {q['drift']['p5_cos']:.4f} |" for q in points]
        return ["### Pruning: the trade-off", "",
                "Each share pruned from the same rows and measured on the same held-out texts; the fertility gain "
                "kept is the share of the unpruned selection's gain over the base:", "",
                "| pruned | tokens added | held-out fertility | fertility gain kept | drift mean | drift p5 |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |", *rows, ""]

    def _token_drift_lines(self, top: int = 15) -> list[str]:
        if not self.token_drift:
            return []
        worse = [t for t in self.token_drift if t["total_rise"] > 0]
        rows = [f"| `{t['token']}` | {t['texts']} | {t['mean_rise']:+.4f} | {t['total_rise']:+.4f} |"
                for t in self.token_drift[:top]]
        return ["### Which new tokens still move embeddings", "",
                f"Of the {len(self.token_drift):,} new tokens in these held-out texts, {len(worse):,} still lower "
                "the cosine: reading one of them as its base pieces again (every other new token kept) raises "
                "cos(base, stage 1) of a text holding it by the rise below. The most costly first:", "",
                "| token | held-out texts | mean rise | total rise |", "| --- | ---: | ---: | ---: |", *rows, ""]

    def _threshold_table(self) -> list[str]:
        if not self.thresholds:
            return []
        rows = [f"| {t['min_count']}{' (chosen)' if t['min_count'] == self.min_count else ''} | {t['tokens']:,} | "
                f"{t['fertility']:.3f} | {t['single']:.1%} |" for t in self.thresholds]
        return ["## Minimum corpus uses: the trade-off", "", "| min uses | tokens added | held-out fertility | "
                "single-token words |", "| ---: | ---: | ---: | ---: |", *rows, ""]

    def _rejected_lines(self) -> list[str]:
        lines = []
        for reason, examples in self.rejected_examples.items():
            if examples:
                shown = ", ".join(f"`{e['token']}`" + (f" ({e['uses']})" if e["uses"] is not None else "")
                                  for e in examples)
                lines.append(f"- rejected as {reason}" + (" (uses in the corpus)" if reason != "not_a_word" else "")
                             + f": {shown}")
        return ["## Rejected candidates", "", *lines, ""] if lines else []

    def _example_table(self) -> list[str]:
        rows = [f"| `{e['token']}` | {' '.join(e['base_pieces'])} | {e.get('uses', '')} |" for e in self.examples]
        return ["## Added tokens (largest saving first)", "", "| new token | base pieces | uses |",
                "| --- | --- | ---: |", *rows]
