"""Ingest benchmark: parse rate, language-filter rate/agreement, memory, whole-PubMed projection.

Every number is a ratio against a baseline measured in the same run, on the same real files
(``../shared/data/pubmed`` replicated to a 30,000-article baseline-sized file):

    python bench/ingest.py [--articles 30000] [--lang-docs 3000]

Needs ``pubmed_parser`` (test extra) for the parse baseline; with ``pubmedparser2`` installed
(``pip install -e '.[bench]'``, a C parser: the speed bar) it is timed on the same file too,
single-threaded, collecting the fields we read (title, abstract, journal, language, keywords,
MeSH).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"

from mosaic_core.config import PairConfig  # noqa: E402
from mosaic_core.data.langid import detect_language, langdetect_full  # noqa: E402
from mosaic_core.data.pairs import FileStats, iter_rows  # noqa: E402
from mosaic_core.data.pubmed import Citation, iter_citations  # noqa: E402


def build_file(n: int, out: Path) -> Path:
    """A baseline-sized file made by replicating the real current-shape articles, each copy
    with a PMID of its own, as in a baseline file."""
    articles = []
    for f in sorted((SHARED / "pubmed").glob("pubmed21n*.xml.gz")):
        articles += re.findall(rb"<PubmedArticle>.*?</PubmedArticle>", gzip.decompress(f.read_bytes()), re.S)
    if not articles:
        sys.exit(f"no real PubMed files under {SHARED / 'pubmed'}: this benchmark needs ../shared/data")
    pmid = re.compile(rb"<PMID Version=\"(\d+)\">\d+</PMID>")
    body = b"\n".join(
        pmid.sub(rb'<PMID Version="\1">%d</PMID>' % (i + 1), articles[i % len(articles)], count=1) for i in range(n)
    )
    xml = b'<?xml version="1.0" encoding="utf-8"?>\n<PubmedArticleSet>\n' + body + b"\n</PubmedArticleSet>\n"
    out.write_bytes(gzip.compress(xml, compresslevel=6))
    return out


def timed(fn, repeats: int = 1):
    """(result, best wall time of ``repeats`` runs): the minimum filters out machine noise."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return result, best


PP2_FIELDS = {
    "root": "//PubmedArticleSet", "key": "/PubmedArticle/MedlineCitation/PMID",
    "Title": "/PubmedArticle/MedlineCitation/Article/ArticleTitle",
    "Abstract": "/PubmedArticle/MedlineCitation/Article/Abstract/AbstractText",
    "Journal": "/PubmedArticle/MedlineCitation/Article/Journal/Title",
    "Language": "/PubmedArticle/MedlineCitation/Article/Language",
    "Keywords": "/PubmedArticle/MedlineCitation/KeywordList/Keyword",
    "Mesh": "/PubmedArticle/MedlineCitation/MeshHeadingList/MeshHeading/DescriptorName",
}


def pubmedparser2_seconds(path: Path, work: Path, repeats: int) -> float | None:
    """Best wall time of ``pubmedparser2.read_xml`` on ``path`` (one thread), None if not installed."""
    try:
        import pubmedparser
    except ImportError:
        return None

    runs = iter(range(repeats))

    def run() -> None:
        out = work / f"pubmedparser2-{next(runs)}"  # a fresh folder: it skips files it has read
        out.mkdir()
        pubmedparser.read_xml([str(path)], PP2_FIELDS, str(out), relative_to_default_data=False, n_threads=1)

    return timed(run, repeats)[1]


def peak_rss_mb(path: Path) -> float:
    """Peak RSS (VmHWM) of a fresh process that streams ``path`` through iter_citations.

    VmHWM, not ru_maxrss: the latter survives exec and would report this parent's size.
    """
    code = (
        "import re,sys; sys.path.insert(0, %r)\n"
        "from mosaic_core.data.pubmed import iter_citations\n"
        "n = sum(1 for _ in iter_citations(%r))\n"
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print(int(hwm) / 1024)"
    ) % (str(ROOT), str(path))
    return float(subprocess.check_output([sys.executable, "-c", code]).decode().strip())


def language_texts(limit: int) -> list[str]:
    """Real records: every XML title+abstract, every vernacular (non-English) title, then the
    biomedical JSONL corpus, up to ``limit``."""
    texts = []
    for f in sorted((SHARED / "pubmed").iterdir()):
        for c in iter_citations(f):
            if isinstance(c, Citation):
                texts.append(f"{c.title.strip('[].')} {c.abstract()}".strip())
                if c.vernacular_title:
                    texts.append(c.vernacular_title)
    with open(SHARED / "biomed" / "biomed_title_abstract.jsonl") as fh:
        for line in fh:
            rec = json.loads(line)
            texts.append(f"{rec['title'] or ''} {rec['abstract'] or ''}".strip())
    return texts[:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--articles", type=int, default=30_000)
    ap.add_argument("--lang-docs", type=int, default=3_000)
    ap.add_argument("--cores", type=int, nargs="*", default=[1, 2, 16, 64])
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per parser (best is kept)")
    args = ap.parse_args()
    import pubmed_parser

    with tempfile.TemporaryDirectory() as tmp:
        big = build_file(args.articles, Path(tmp) / "pubmed99n0001.xml.gz")
        double = build_file(2 * args.articles, Path(tmp) / "pubmed99n0002.xml.gz")
        print(f"file: {args.articles} real articles replicated, {big.stat().st_size / 1e6:.1f} MB gz")

        _, t_gunzip = timed(lambda: gzip.decompress(big.read_bytes()), args.repeats)
        n_ours, t_ours = timed(lambda: sum(1 for _ in iter_citations(big)), args.repeats)
        n_pp, t_pp = timed(lambda: sum(1 for _ in pubmed_parser.parse_medline_xml(str(big))), args.repeats)
        assert n_ours == n_pp == args.articles, (n_ours, n_pp)
        print(f"\n== parse (single core, best of {args.repeats}) ==")
        print(f"gunzip only         {args.articles / t_gunzip:10,.0f} articles/s")
        print(f"pubmed_parser       {n_pp / t_pp:10,.0f} articles/s   (baseline)")
        print(f"mosaic iter_citations {n_ours / t_ours:8,.0f} articles/s   ratio {t_pp / t_ours:.2f}x "
              f"(target >= 5x); {t_gunzip / t_ours:.2f}x gunzip speed")
        t_pp2 = pubmedparser2_seconds(big, Path(tmp), args.repeats)
        if t_pp2 is None:
            print("pubmedparser2       not installed (pip install -e '.[bench]'): C speed bar skipped")
        else:
            print(f"pubmedparser2 (C)   {args.articles / t_pp2:10,.0f} articles/s   mosaic at "
                  f"{t_pp2 / t_ours:.2f}x its speed (target >= 1.0x)")

        print("\n== memory (peak RSS, fresh process) ==")
        rss1, rss2 = peak_rss_mb(big), peak_rss_mb(double)
        print(f"{args.articles:,} articles: {rss1:.0f} MB   {2 * args.articles:,} articles: {rss2:.0f} MB "
              f"(target < 300 MB, flat in file size: ratio {rss2 / rss1:.2f})")

        print("\n== whole file: parse + pairs + language filter ==")
        stats = FileStats()
        _, t_file = timed(lambda: sum(len(b) for b in iter_rows(big, PairConfig(), stats)))
        print(f"{args.articles:,} articles in {t_file:.1f} s ({args.articles / t_file:,.0f} articles/s), "
              f"kept {stats.kept:,}, dropped {dict(stats.dropped)}")
        n_files = 1_300
        for cores in args.cores:
            hours = n_files * t_file / cores / 3600
            print(f"projection: ~{n_files} baseline files on {cores:>3} cores: {hours:6.2f} h")

    print("\n== language filter ==")
    texts = language_texts(args.lang_docs)
    full, t_full = timed(lambda: [langdetect_full(t) for t in texts])
    fast, t_fast = timed(lambda: [detect_language(t) for t in texts])
    disagree = [(a, b, t[:90]) for a, b, t in zip(full, fast, texts, strict=True) if a != b]
    print(f"{len(texts)} real title+abstract records")
    print(f"full-text langdetect {len(texts) / t_full:8,.0f} docs/s   (baseline)")
    print(f"mosaic detect_language {len(texts) / t_fast:6,.0f} docs/s   ratio {t_full / t_fast:.1f}x "
          f"(target >= 2,000 docs/s/core)")
    agree = 1 - len(disagree) / len(texts)
    print(f"agreement with full-text langdetect: {agree:.4%} ({len(disagree)} disagreements; target >= 99.5%)")
    print(f"non-English by full-text langdetect: {sum(x != 'en' for x in full)}")
    for a, b, t in disagree[:5]:
        print(f"  full={a} fast={b}: {t}")


if __name__ == "__main__":
    main()
