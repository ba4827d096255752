"""The built-in demo domain: an invented biomedical sub-field, generated from a seed.

Two dozen invented words (``zorvatide``, ``keltrase``, …) each name a drug or a protein with a
fixed meaning — what it does, to what, where (``a drug that blocks calcium channels in the
heart muscle``); three of them act on each organ. No model has seen them: a general-purpose
model splits them into meaningless pieces. The generated snapshot is ordinary PubMed XML about
them, mixed with ordinary biomedical filler, laid out like NCBI's (``baseline/`` +
``updatefiles/``, ``.md5`` sidecars, both the current ``PubmedArticleSet`` and the older
``MedlineCitationSet`` shape), so every stage has real work:

* ingest drops non-English records and short abstracts, applies a deletion and keeps the
  latest version of a revised citation;
* the consistency filter drops pairs whose title and abstract are about different things;
* stage 1 adds the invented words as tokens;
* training sees each word in citations whose title names it over an abstract that explains
  it, and in *twin* citations: two studies alike in everything but the word (same patients,
  place, outcome), one titled by what its word does, the other by what the other word does.
  Only a model that knows which word does what can tell the twins apart; the consistency
  filter keeps them (the twin is the only competitor) and hands each to the other as its hard
  negative.

The **invented-term task** (a BEIR folder) asks what only a model that has learned the words can
answer: its queries describe what a word's drug or protein does, in synonyms the training
citations never use for it (``agent that shuts down calcium channels in the myocardium``);
its relevant documents use the word without explaining it (``Serum zorvatide levels were
measured in 120 patients with arrhythmia``); the distractors are the same sentences about the
two other words acting on the same organ and about real proteins. A model that knows only the
organ ranks the three words' documents alike.

**A stream of updates** (:func:`make_stream`) keeps the baseline and adds update files in which
new invented words (``quelvorin``, …) appear over time, one per update: what a pipeline that
adapts as new data arrives must pick up (bench/continual.py).

Everything is a function of ``seed``: another seed gives other words' meanings and other texts.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from html import escape

from mosaic_core.config import OFFLINE_MODEL, PipelineConfig, StageConfig

WORDS = ("zorvatide", "keltrase", "drovastin", "plenixor", "vartolimab", "brindoxin", "selvaprine", "tamorvin",
         "glexitol", "fenoravir", "corbatase", "mirelquin", "oxavelin", "drenvolide", "sulvemab", "praxilene",
         "nortavin", "helvorin", "cyprelix", "zelmorase", "trovinol", "quentalib", "belmoxan", "falvetrin")
NEW_WORDS = ("quelvorin", "tramixide", "bexolantin", "vintoprase", "zaldrimab", "orvastel", "plexitrane",
             "huvendrax", "kortavine", "sylmoprex")
"""The words a stream of updates introduces, one per update (:func:`make_stream`); at most two per organ."""

# Each slot: synonyms the training citations use (first two) and synonyms only the evaluation
# queries use (the rest), so the task tests meaning, not memorised phrases.
ACTIONS = {
    "block": ("blocks", "inhibits", "shuts down", "switches off"),
    "activate": ("activates", "stimulates", "switches on", "turns on"),
    "degrade": ("breaks down", "degrades", "dissolves", "clears away"),
    "transport": ("transports", "carries", "moves", "shuttles"),
    "produce": ("produces", "synthesises", "makes", "manufactures"),
}
TARGETS = {
    "calcium": ("calcium channels", "calcium ion channels", "Ca2+ channels", "L-type calcium pores"),
    "insulin": ("insulin receptors", "the insulin receptor", "receptors for insulin", "insulin-binding receptors"),
    "collagen": ("collagen fibres", "collagen fibrils", "collagen strands", "fibrillar collagen"),
    "copper": ("copper", "copper ions", "cupric ions", "the metal copper"),
    "iron": ("iron", "iron ions", "ferrous iron", "stored iron"),
    "cholesterol": ("cholesterol", "cholesterol molecules", "sterols", "LDL cholesterol"),
    "dopamine": ("dopamine receptors", "receptors for dopamine", "D2 receptors", "dopaminergic receptors"),
    "potassium": ("potassium channels", "potassium ion channels", "K+ channels", "potassium pores"),
    "amyloid": ("amyloid deposits", "amyloid plaques", "amyloid aggregates", "beta-amyloid clumps"),
    "urate": ("uric acid", "urate", "urate crystals", "uric acid crystals"),
}
ORGANS = {
    "heart": ("heart muscle", "cardiac muscle", "myocardium", "heart"),
    "liver": ("liver", "hepatic tissue", "hepatocytes", "liver cells"),
    "kidney": ("kidney", "renal tubules", "nephrons", "kidneys"),
    "brain": ("brain", "neurons", "nerve cells", "central nervous system"),
    "bone": ("bone", "osteoblasts", "skeleton", "bone tissue"),
    "skin": ("skin", "epidermis", "dermal cells", "skin cells"),
    "lung": ("lung", "airways", "alveoli", "lungs"),
    "pancreas": ("pancreas", "islet cells", "beta cells", "pancreatic islets"),
}
CONDITIONS = {"heart": ("arrhythmia", "heart failure"), "liver": ("liver fibrosis", "hepatitis"),
              "kidney": ("chronic kidney disease", "nephropathy"), "brain": ("epilepsy", "Parkinson disease"),
              "bone": ("osteoporosis", "fracture healing"), "skin": ("psoriasis", "wound healing"),
              "lung": ("asthma", "pulmonary fibrosis"), "pancreas": ("type 2 diabetes", "pancreatitis")}
KINDS = {"drug": ("drug", "compound", "agent", "medicine"), "protein": ("protein", "enzyme", "protein", "molecule")}
TRAIN, EVAL = slice(0, 2), slice(2, 4)
# What makes each study its own: who, where, and what was measured (shared by its title and abstract).
POPULATIONS = ("children", "adolescents", "older adults", "pregnant women", "athletes", "veterans",
               "nursing-home residents", "smokers", "night-shift workers", "postmenopausal women", "infants",
               "farmers")
PLACES = ("Norway", "Kenya", "Brazil", "Japan", "Canada", "India", "Chile", "Finland", "Vietnam", "Morocco",
          "Scotland", "New Zealand", "Peru", "Poland")
OUTCOMES = ("hospital admissions", "mortality", "symptom scores", "quality of life", "time to relapse",
            "exercise capacity", "days off work", "need for surgery")

USAGE_FRAMES = (
    "Serum {w} levels were measured in {n} patients with {c}.",
    "Mice lacking {w} developed {c} within twelve months.",
    "{W} was given to {n} patients with {c} in a pilot study.",
    "The dose of {w} was adjusted to body weight in {n} patients with {c}.",
    "Two batches of {w} were compared in {n} patients with {c}.",
    "Plasma {w} peaked two hours after the first dose in {n} patients with {c}.",
)
DISTRACTOR_NAMES = ("ferritin", "albumin", "myostatin", "lactoferrin", "hepcidin", "osteocalcin", "renin",
                    "fibrinogen", "transferrin", "prolactin")
FILLER_DRUGS = ("metformin", "aspirin", "atorvastatin", "insulin glargine", "ibuprofen", "warfarin", "heparin",
                "lithium", "amoxicillin", "prednisone", "omeprazole", "levothyroxine")
FILLER_DISEASES = ("hypertension", "asthma", "stroke", "sepsis", "anaemia", "obesity", "migraine",
                   "rheumatoid arthritis", "depression", "pneumonia", "gout", "atrial fibrillation")
FOREIGN = (("it", "Clinical study of the treatment of the disease in elderly patients",
            "Abbiamo studiato {n} pazienti anziani ricoverati in ospedale per valutare la sicurezza del trattamento. "
            "I risultati mostrano che la terapia riduce i ricoveri e migliora la qualità della vita dei pazienti "
            "seguiti per due anni, senza effetti collaterali gravi nella maggior parte dei casi osservati."),
           ("de", "Clinical trial of the treatment of the disease in older patients",
            "Wir untersuchten {n} ältere Patienten im Krankenhaus, um die Sicherheit der Behandlung zu prüfen. Die "
            "Ergebnisse zeigen, dass die Therapie die Zahl der Krankenhausaufenthalte senkt und die Lebensqualität "
            "der Patienten über zwei Jahre verbessert, ohne schwere Nebenwirkungen in den meisten Fällen."))


@dataclass(frozen=True)
class Term:
    """An invented word and what it means: its kind, action, target and organ (slot keys)."""

    word: str
    kind: str
    action: str
    target: str
    organ: str

    def definition(self) -> str:
        """What the word means in the glossary: ``a drug that blocks calcium channels in the heart
        muscle``, in the first of the training citations' synonyms (never the evaluation's)."""
        kind, act = KINDS[self.kind][TRAIN][0], ACTIONS[self.action][TRAIN][0]
        tgt, org = TARGETS[self.target][TRAIN][0], ORGANS[self.organ][TRAIN][0]
        return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} that {act} {tgt} in the {org}"

    def meaning(self, which: slice, rng: random.Random, article: bool = True) -> str:
        """``a drug that blocks calcium channels in the heart muscle``, with synonyms from ``which``."""
        kind, act = rng.choice(KINDS[self.kind][which]), rng.choice(ACTIONS[self.action][which])
        tgt, org = rng.choice(TARGETS[self.target][which]), rng.choice(ORGANS[self.organ][which])
        phrase = f"{kind} that {act} {tgt} in the {org}"
        return f"{'an' if kind[0] in 'aeiou' else 'a'} {phrase}" if article else phrase


@dataclass
class Citation:
    pmid: int
    title: str
    abstract: str
    journal: str
    keywords: tuple[str, ...] = ()
    language: str = "eng"
    version: int = 1


@dataclass
class DemoData:
    """The generated snapshot (relative path → bytes), the invented-term task and the glossary
    (each invented word's definition: :meth:`Term.definition`)."""

    files: dict[str, bytes]
    terms: list[Term]
    corpus: list[dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def glossary(self) -> list[dict]:
        """``{term, definition}`` of every invented word, in the order of :attr:`terms`."""
        return [{"term": t.word, "definition": t.definition()} for t in self.terms]


def make_terms(seed: int) -> list[Term]:
    """The invented words, three per organ, each given by ``seed`` an action and a target that
    differ from the other two of its organ."""
    rng = random.Random(f"terms-{seed}")
    words = list(WORDS)
    rng.shuffle(words)
    terms = []
    for o, organ in enumerate(ORGANS):
        targets, actions = rng.sample(list(TARGETS), 3), rng.sample(list(ACTIONS), 3)
        for j in range(3):
            terms.append(Term(words[3 * o + j], "drug" if j % 2 == 0 else "protein", actions[j], targets[j], organ))
    return terms


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Study:
    """What one study is about besides its word: who, where, which condition and outcome."""

    who: str
    where: str
    condition: str
    outcome: str
    n: int
    weeks: int
    pct: int

    @classmethod
    def draw(cls, rng: random.Random, organ: str) -> Study:
        return cls(rng.choice(POPULATIONS), rng.choice(PLACES), rng.choice(CONDITIONS[organ]), rng.choice(OUTCOMES),
                   rng.randint(20, 400), rng.randint(4, 52), rng.randint(10, 60))

    def result(self, subject: str) -> str:
        return (f"We gave {subject} to {self.n} {self.who} with {self.condition} in {self.where} for {self.weeks} "
                f"weeks. Compared with placebo it reduced {self.outcome} by {self.pct}%. Adverse events were mild "
                "and resolved without treatment, and no participant stopped early.")


def explained_citations(term: Term, rng: random.Random, first_pmid: int, n: int) -> list[Citation]:
    """Titles naming the word over abstracts that explain and use it."""
    out = []
    for i in range(n):
        st = Study.draw(rng, term.organ)
        title = f"{_cap(term.word)} and {st.outcome} in {st.who} with {st.condition} in {st.where}"
        abstract = f"{_cap(term.word)} is {term.meaning(TRAIN, rng)}. {st.result(term.word)}"
        out.append(Citation(first_pmid + i, title, abstract, f"Journal of {_cap(term.organ)} Research",
                            (st.condition, ORGANS[term.organ][0])))
    return out


def twin_citations(a: Term, b: Term, rng: random.Random, first_pmid: int, n: int) -> list[Citation]:
    """``n`` pairs of twin studies of ``a`` and ``b`` (see the module docstring): titles saying what
    the word does over abstracts naming it, and titles naming it over abstracts saying what it does."""
    out = []
    for i in range(n):
        st = Study.draw(rng, a.organ)
        journal = f"Journal of {_cap(a.organ)} Research"
        for j, term in enumerate((a, b)):
            pmid = first_pmid + 4 * i + 2 * j
            described = _cap(term.meaning(TRAIN, rng))
            out.append(Citation(pmid, f"{described} lowers {st.outcome} in {st.who} with {st.condition} in {st.where}",
                                st.result(term.word), journal, (st.condition,)))
            out.append(Citation(pmid + 1, f"{_cap(term.word)} lowers {st.outcome} in {st.who} with {st.condition} in "
                                f"{st.where}", st.result(term.meaning(TRAIN, rng)), journal, (st.condition,)))
    return out


def filler_citations(rng: random.Random, first_pmid: int, n: int) -> list[Citation]:
    """Ordinary biomedical-sounding citations that name no invented word."""
    out = []
    for i in range(n):
        drug, disease = rng.choice(FILLER_DRUGS), rng.choice(FILLER_DISEASES)
        who, where, outcome = rng.choice(POPULATIONS), rng.choice(PLACES), rng.choice(OUTCOMES)
        cohort, years, pct = rng.randint(50, 5000), rng.randint(1, 10), rng.randint(5, 45)
        design = rng.choice(("cohort study", "randomised trial", "case-control study", "registry analysis"))
        title = f"{_cap(drug)} and {outcome} in {who} with {disease} in {where}: a {design}"
        abstract = (f"We examined whether {drug} changes {outcome} in {cohort} {who} with {disease} in {where}, "
                    f"followed for {years} years in a {design}. Those given {drug} had {pct}% lower {outcome} than "
                    f"those who were not, after adjustment for age, sex and other medicines. The association was "
                    f"consistent across subgroups and calls for a trial of {drug} in {disease}.")
        out.append(Citation(first_pmid + i, title, abstract, "Annals of Clinical Demonstration", (disease,)))
    return out


def noise_citations(rng: random.Random, first_pmid: int, fillers: list[Citation]) -> list[Citation]:
    """Records the filters must drop: non-English abstracts, short abstracts, and titles over
    another article's abstract (incoherent pairs)."""
    out = []
    pmid = first_pmid
    for i in range(12):
        lang, title, abstract = FOREIGN[i % len(FOREIGN)]
        out.append(Citation(pmid, f"[{title}]", abstract.format(n=rng.randint(20, 300)), "Acta Demonstrationis",
                            language={"it": "ita", "de": "ger"}[lang]))
        pmid += 1
    for _ in range(8):
        out.append(Citation(pmid, f"Short report on {rng.choice(FILLER_DISEASES)} in clinical practice",
                            "A brief note without results.", "Demonstration Letters"))
        pmid += 1
    for _ in range(30):
        a, b = rng.sample(fillers, 2)
        title = (f"Genome-wide mapping of {rng.choice(TARGETS[rng.choice(list(TARGETS))])} regulators in "
                 f"{rng.choice(('zebrafish', 'yeast', 'fruit flies'))} embryos")
        out.append(Citation(pmid, title, b.abstract, a.journal))
        pmid += 1
    return out


def task_data(terms: list[Term], rng: random.Random) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    """The invented-term task: queries describe a word's meaning in held-out synonyms; relevant
    documents use the word without explaining it, in sentences that name a condition of its
    organ — as the documents of the organ's other two words and of real proteins do."""
    corpus, queries, qrels = [], {}, {}
    for t in terms:
        ids = []
        for j, frame in enumerate(rng.sample(USAGE_FRAMES, 4)):
            ids.append(f"{t.word}-{j}")
            corpus.append({"id": ids[-1], "title": "", "text": frame.format(
                w=t.word, W=_cap(t.word), n=rng.randint(20, 400), c=rng.choice(CONDITIONS[t.organ]))})
        asked: set[str] = set()
        while len(asked) < 2:  # two different descriptions
            asked.add(t.meaning(EVAL, rng, article=False))
        for k, query in enumerate(sorted(asked)):
            queries[f"{t.word}-q{k}"] = query
            qrels[f"{t.word}-q{k}"] = dict.fromkeys(ids, 1)
    for organ in ORGANS:
        for j, name in enumerate(rng.sample(DISTRACTOR_NAMES, 2)):
            corpus.append({"id": f"{organ}-x{j}", "title": "", "text": rng.choice(USAGE_FRAMES).format(
                w=name, W=_cap(name), n=rng.randint(20, 400), c=rng.choice(CONDITIONS[organ]))})
    return corpus, queries, qrels


def _article_xml(c: Citation) -> str:
    kw = "".join(f'<Keyword MajorTopicYN="N">{escape(k)}</Keyword>' for k in c.keywords)
    return (
        f'<MedlineCitation Status="MEDLINE" Owner="NLM"><PMID Version="{c.version}">{c.pmid}</PMID>'
        f'<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Internet"><PubDate><Year>2025</Year>'
        f"</PubDate></JournalIssue><Title>{escape(c.journal)}</Title></Journal>"
        f"<ArticleTitle>{escape(c.title)}</ArticleTitle><Abstract><AbstractText>{escape(c.abstract)}</AbstractText>"
        f'</Abstract><AuthorList CompleteYN="Y"><Author ValidYN="Y"><LastName>Example</LastName><ForeName>Ada'
        f"</ForeName></Author></AuthorList><Language>{c.language}</Language><PublicationTypeList>"
        f'<PublicationType UI="D016428">Journal Article</PublicationType></PublicationTypeList></Article>'
        + (f'<KeywordList Owner="NOTNLM">{kw}</KeywordList>' if kw else "") + "</MedlineCitation>"
    )


def pubmed_file(citations: list[Citation], shape: str, deleted: tuple[int, ...] = ()) -> bytes:
    """A snapshot file in the current (``pubmed``) or the older (``medline``) shape."""
    dc = ("<DeleteCitation>" + "".join(f'<PMID Version="1">{p}</PMID>' for p in deleted) + "</DeleteCitation>"
          if deleted else "")
    head = '<?xml version="1.0" encoding="utf-8"?>\n'
    if shape == "medline":
        body = "\n".join(_article_xml(c) for c in citations)
        return f"{head}<MedlineCitationSet>\n{body}\n{dc}</MedlineCitationSet>\n".encode()
    body = "\n".join(f"<PubmedArticle>{_article_xml(c)}<PubmedData><History><PubMedPubDate PubStatus=\"pubmed\">"
                     f"<Year>2025</Year></PubMedPubDate></History></PubmedData></PubmedArticle>" for c in citations)
    return f"{head}<PubmedArticleSet>\n{body}\n{dc}</PubmedArticleSet>\n".encode()


def _with_md5(files: dict[str, bytes]) -> dict[str, bytes]:
    out = dict(files)
    for name, data in files.items():
        out[f"{name}.md5"] = f"MD5({name.rsplit('/', 1)[-1]})= {hashlib.md5(data).hexdigest()}\n".encode()
    return out


def baseline_citations(seed: int, explained: int = 8, twins: int = 6, fillers: int = 150,
                       ) -> tuple[list[Term], list[Citation]]:
    """(the invented words, the baseline's citations in file order) of ``seed``: per word
    ``explained`` explained citations and ``twins`` twin studies with each of its organ's other
    two words, ``fillers`` filler citations and the noise the filters must drop."""
    rng = random.Random(f"demo-{seed}")
    terms = make_terms(seed)
    cites = [c for i, t in enumerate(terms) for c in explained_citations(t, rng, 91_000_000 + 1000 * i, explained)]
    for o in range(len(ORGANS)):
        group = terms[3 * o: 3 * o + 3]
        for k, (a, b) in enumerate(((group[0], group[1]), (group[0], group[2]), (group[1], group[2]))):
            cites += twin_citations(a, b, rng, 94_000_000 + 1000 * (3 * o + k), twins)
    filler = filler_citations(rng, 92_000_000, fillers)
    everything = cites + filler + noise_citations(rng, 93_000_000, filler)
    rng.shuffle(everything)
    return terms, everything


def _baseline_files(everything: list[Citation]) -> dict[str, bytes]:
    half = len(everything) // 2
    return {"baseline/pubmed26n0001.xml": pubmed_file(everything[:half], "pubmed"),
            "baseline/pubmed26n0002.xml": pubmed_file(everything[half:], "medline")}


def make_demo(seed: int = 0, explained: int = 8, twins: int = 6, fillers: int = 150) -> DemoData:
    """The demo snapshot and task for ``seed`` (deterministic): :func:`baseline_citations`, and an
    update file revising one citation and deleting two."""
    terms, everything = baseline_citations(seed, explained, twins, fillers)
    half = len(everything) // 2
    first, second = everything[:half], everything[half:]
    revised = Citation(**{**first[0].__dict__, "version": 2, "title": first[0].title + " (corrected)"})
    deleted = (first[1].pmid, second[1].pmid)
    corpus, queries, qrels = task_data(terms, random.Random(f"task-{seed}"))
    files = _with_md5({**_baseline_files(everything),
                       "updatefiles/pubmed26n0003.xml": pubmed_file([revised], "pubmed", deleted)})
    return DemoData(files, terms, corpus, queries, qrels)


@dataclass
class DemoStream(DemoData):
    """The demo as a stream of updates (:func:`make_stream`): the baseline's files and one update
    file per tick (``files``, with ``.md5`` sidecars), the words of both (``terms``: the
    baseline's, then the new ones in the order they appear), the invented-term task over all of
    them, and the tick each word first appears at (``introduced``: 0 for the baseline's)."""

    introduced: dict[str, int] = field(default_factory=dict)

    @property
    def updates(self) -> list[str]:
        """The update files' paths (``updatefiles/…``), tick 1 first."""
        return sorted(n for n in self.files if n.startswith("updatefiles/") and n.endswith(".xml"))


def stream_terms(seed: int, terms: list[Term]) -> list[Term]:
    """The words :data:`NEW_WORDS` name, each given by ``seed`` an organ (the organs in turn) and an
    action and a target that no other word of its organ in ``terms`` (or before it) has."""
    rng = random.Random(f"stream-terms-{seed}")
    organs = list(ORGANS)
    rng.shuffle(organs)
    out: list[Term] = []
    for i, word in enumerate(NEW_WORDS):
        organ = organs[i % len(organs)]
        taken = [t for t in (*terms, *out) if t.organ == organ]
        action = rng.choice(sorted(set(ACTIONS) - {t.action for t in taken}))
        target = rng.choice(sorted(set(TARGETS) - {t.target for t in taken}))
        out.append(Term(word, "drug" if i % 2 == 0 else "protein", action, target, organ))
    return out


def update_citations(tick: int, n: int, new: Term | None, partners: list[Term], rng: random.Random) -> list[Citation]:
    """The ``n`` citations of update ``tick``: with a ``new`` word, its explained citations (a
    sixth of ``n``) and twin studies with each of ``partners`` (a sixteenth of ``n`` each: four
    citations a study), then filler up to ``n``; without one, filler only."""
    first = 95_000_000 + 10_000 * tick
    cites = []
    if new is not None:
        cites += explained_citations(new, rng, first, max(1, n // 6))
        for j, other in enumerate(partners):
            cites += twin_citations(new, other, rng, first + 2000 + 1000 * j, max(1, n // 16))
    cites += filler_citations(rng, first + 5000, max(0, n - len(cites)))
    rng.shuffle(cites)
    return cites


def make_stream(seed: int = 0, ticks: int = 10, share: float = 0.05) -> DemoStream:
    """The demo of ``seed`` as a baseline and ``ticks`` update files (deterministic).

    The baseline is :func:`make_demo`'s (its two files, byte for byte, without its update file).
    Update ``k`` (``updatefiles/pubmed26n{k+2:04d}.xml``, NCBI's numbering after the baseline)
    holds ``share`` × the baseline's citations: for ``k`` up to ``len(NEW_WORDS)``, the explained
    and twin citations of the ``k``-th new word (:func:`stream_terms`; twins with two words of its
    organ), then filler; later updates filler only. Update ``k`` is the same for any ``ticks``
    of at least ``k``. The task and the glossary hold every word the stream introduces."""
    if ticks < 1 or not 0 < share <= 1:
        raise ValueError(f"make_stream: ticks {ticks} must be at least 1 and share {share} in (0, 1]")
    terms, everything = baseline_citations(seed)
    new = stream_terms(seed, terms)[:ticks]
    n = round(share * len(everything))
    files = _baseline_files(everything)
    for k in range(1, ticks + 1):
        rng = random.Random(f"stream-{seed}-{k}")
        word = new[k - 1] if k <= len(new) else None
        partners = rng.sample([t for t in terms if t.organ == word.organ], 2) if word else []
        files[f"updatefiles/pubmed26n{k + 2:04d}.xml"] = pubmed_file(update_citations(k, n, word, partners, rng),
                                                                     "pubmed")
    every = [*terms, *new]
    corpus, queries, qrels = task_data(every, random.Random(f"stream-task-{seed}"))
    introduced = {t.word: 0 for t in terms} | {t.word: k for k, t in enumerate(new, start=1)}
    return DemoStream(_with_md5(files), every, corpus, queries, qrels, introduced)

def demo_pipeline(seed: int, task: str, glossary: str) -> PipelineConfig:
    """The built-in demo's pipeline: its generated snapshot of ``seed`` (the demo source) and its
    glossary (the invented words' definitions, at ``glossary``), the offline MiniLM as base and
    filter model, a 20-step MLM warm-up of the head, the glossary's dictionary stage, then the
    paper's joint stage (30 steps, one hard negative per pair), beside the control (30
    contrastive steps from the base; the definition pairs join both), finishing in minutes on a
    CPU, scored on the held-out pairs and the invented-term task at ``task``."""
    retrieval = {"lr": 5e-5, "max_steps": 30, "eval_every": 15, "hard_negatives": 1, "batch_size": 16,
                 "checkpoint_every": 50, "log_every": 10, "query_max_length": 32, "document_max_length": 64}
    # MiniLM ships no MLM head: a short warm-up trains one (its transform and bias; the embedding
    # rows stay as stage 1 left them) so that the joint stage's MLM term starts from a trained head.
    # No contrastive stage after the joint one: on these 787 pairs it kept its input (step 0) every
    # time, so its minutes bought nothing (docs/results.md, "The demo").
    stages = (StageConfig(name="mlm", kind="mlm", lr=5e-4, schedule="constant", max_steps=20, batch_size=16,
                          log_every=10, mlm_rows=False, document_max_length=64, query_max_length=32),
              StageConfig(name="joint", kind="joint", **retrieval))
    return PipelineConfig.load({
        "base_model": OFFLINE_MODEL,
        "domain": "an invented biomedical sub-field (the MOSAIC demo)",
        "source": {"kind": "demo", "seed": seed},
        # One chunk of ~950 pairs: keep a pair whose document is among its title's 100 nearest. The
        # twin citations that teach the invented words rank up to ~130 for the base model (95th
        # percentile 40), which has never seen the words; the incoherent ones rank 140 or deeper.
        "filter": {"model": OFFLINE_MODEL, "document_max_length": 64, "k": 100},
        "vocab": {"vocab_size": 3000, "min_count": 5,
                  "distill": {"batch_size": 16, "max_length": 64, "max_steps": 20, "eval_every": 10,
                              "heldout_texts": 64, "lr": 3e-3}},
        "train": {"stages": [s.model_dump() for s in stages], "heldout_pairs": 64, "validation_pairs": 64,
                  "validation_pool": 300},
        "eval_tasks": [{"kind": "beir", "name": "invented-terms", "path": task,
                        "description": "finding documents about an invented drug or protein (zorvatide, keltrase, …) "
                                       "from a description of what it does that never names it"}],
        "eval_pool": 500,
        "glossary": {"path": glossary},
    })
