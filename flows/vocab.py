"""The stage-1 flow: a domain corpus in, an expanded model directory out."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from mosaic_core.config import GlossaryConfig, VocabConfig
from tasks.vocab import expand_vocabulary


@flow(name="vocab")
def vocab_flow(corpus: str, cfg: VocabConfig, out_dir: str, glossary: GlossaryConfig | None = None,
               entries: str | None = None, budget: dict | None = None) -> dict:
    """Stage 1 on ``corpus`` into ``out_dir``; with a ``glossary``, its entries (the file
    ``entries``) as stage 1's glossary terms (``budget``: an update tick's budget for
    their rows)."""
    report = expand_vocabulary(corpus, cfg, out_dir, glossary, entries, budget)
    create_markdown_artifact(
        key="vocab-report",
        markdown=(f"Stage 1 on `{corpus}` → `{out_dir}`: **{report['tokens_added']:,} tokens added**; "
                  f"fertility {report['fertility_before']:.3f} → {report['fertility_after']:.3f}; "
                  f"single-token words {report['single_token_share_before']:.1%} → "
                  f"{report['single_token_share_after']:.1%}"),
        description="Vocabulary expansion",
    )
    return report
