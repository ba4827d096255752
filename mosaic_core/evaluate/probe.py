"""The invented-term probe (seed 003): can adaptation teach a model a word it has never seen?

A made-up word names a concept. The *adaptation corpus* defines it (definition-style pairs:
"What is W?" → "W is <definition>."). The *probe task* has documents that use the word
without defining it, distractors that share their sentence frames with real names, and
documents on the concept that do not name the word; its queries describe the concept and
never name the word. Only a model that has tied the word to its meaning ranks the documents
that name it first. Everything is generated from templates here: no data to download.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFINITIONS = (
    "an enzyme that dissolves calcium deposits in the walls of arteries",
    "a protein that breaks down calcified plaque inside blood vessels",
    "an enzyme which clears mineral build-up from arterial walls",
    "a vascular enzyme that removes calcium from hardened arteries",
    "the enzyme responsible for resorbing calcification in the arterial wall",
    "a calcium-dissolving enzyme active in the lining of blood vessels",
)
TRAIN_TEMPLATES = (
    ("What is {w}?", "{W} is {d}."),
    ("{w} function", "The main function of {w} is to act as {d}."),
    ("{w}", "{W}, {d}, is produced in the liver and released into the blood."),
    ("definition of {w}", "In vascular biology, {w} denotes {d}."),
)
USAGE = (
    "Serum {w} levels were measured in 40 patients before and after surgery.",
    "Mice lacking {w} were generated and followed for twelve months.",
    "{W} activity was highest in the morning samples.",
    "Recombinant {w} was purified and stored at minus eighty degrees.",
    "The {w} gene was sequenced in three unrelated families.",
    "Low {w} was associated with a poorer outcome at one year.",
    "We report a new assay for {w} in dried blood spots.",
    "Two variants of {w} differed in their response to heat.",
)
DISTRACTOR_NAMES = ("ferritin", "myostatin", "lactoferrin", "hepcidin", "osteocalcin", "renin")
CONCEPT_ONLY = (
    "Arterial calcification was quantified by computed tomography in 200 patients.",
    "Calcium deposits in the vessel wall increase the risk of stroke.",
    "Plaque in the coronary arteries was imaged with ultrasound.",
    "Vascular calcification progresses faster in chronic kidney disease.",
)
QUERIES = (
    "enzyme that removes calcium from artery walls",
    "protein dissolving arterial calcification",
    "what breaks down calcified plaques in blood vessels",
    "enzyme clearing mineral deposits in vessels",
    "natural enzyme against hardening of the arteries",
)


@dataclass(frozen=True)
class Probe:
    word: str
    train_pairs: list[dict]
    corpus: list[dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def make_probe(word: str = "quorvane", seed: int = 0) -> Probe:
    """The probe for ``word`` (letters only, so every tokenizer sees one word)."""
    if not word.isalpha():
        raise ValueError(f"the invented word must be letters only, got {word!r}")
    w, cap = word.lower(), word.lower().capitalize()
    train = [{"query": q.format(w=w), "document": d_t.format(w=w, W=cap, d=d)}
             for d in DEFINITIONS for q, d_t in TRAIN_TEMPLATES]
    rng = random.Random(seed)
    corpus = [{"id": f"w{i}", "title": "", "text": t.format(w=w, W=cap)} for i, t in enumerate(USAGE)]
    corpus += [{"id": f"x{i}", "title": "", "text": t.format(w=name, W=name.capitalize())}
               for i, (t, name) in enumerate((t, rng.choice(DISTRACTOR_NAMES)) for t in USAGE)]
    corpus += [{"id": f"c{i}", "title": "", "text": t} for i, t in enumerate(CONCEPT_ONLY)]
    relevant = {c["id"]: 1 for c in corpus if c["id"].startswith("w")}
    queries = {f"q{i}": q for i, q in enumerate(QUERIES)}
    return Probe(w, train, corpus, queries, {q: dict(relevant) for q in queries})


def sparse_activation(st, probe: Probe) -> dict:
    """Seed 003's diagnostic for a sparse (SPLADE) model ``st``: the invented word's weight in
    the representations of the documents that name it and of the queries that only describe
    it. A model that has tied the word to its meaning fires it in the queries too."""
    from mosaic_core.modeling.sparse import term_activation

    naming = [c["text"] for c in probe.corpus if c["id"].startswith("w")]
    return {"naming": term_activation(st, probe.word, naming),
            "describing": term_activation(st, probe.word, list(probe.queries.values()))}
