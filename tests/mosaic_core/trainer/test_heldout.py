"""The held-out split and the training examples: the split from an array of content hashes is the
sorted-hash split it always was, its recorded thresholds give it again and keep it as the corpus
grows, and a PairSet over an Arrow table reads the examples, hard negatives included, that the
lists of Python strings held before."""

import hashlib
import random

import numpy as np
import pyarrow as pa

from mosaic_core.trainer.data import PairSet
from mosaic_core.data.splits import split_sizes
from mosaic_core.trainer.heldout import (Kept, RetrievalProbe, Threshold, held_out_change, split_by_hash,
                                         split_examples, split_indices, text_hashes)


def test_the_split_sizes_are_those_split_indices_holds_out():
    pairs = [(f"query {i}", f"document {i}") for i in range(219)]
    for asked in ((256, 256), (4, 4), (0, 30), (43, 0)):
        split = split_indices(pairs, *asked)
        assert split_sizes(len(pairs), *asked) == (len(split.test), len(split.validation)), asked
    assert split_sizes(219, 256, 256) == (43, 35)  # a fifth each: a small file is not held out whole


def sorted_split(pairs, n_test, n_validation):
    """The split as it was computed before: Python's sort of the indices by each pair's digest."""
    order = sorted(range(len(pairs)), key=lambda i: hashlib.blake2b("\x1f".join(pairs[i]).encode(),
                                                                     digest_size=8).digest())
    n_test, n_validation = split_sizes(len(pairs), n_test, n_validation)
    test, validation = set(order[:n_test]), set(order[n_test:n_test + n_validation])
    return [i for i in range(len(pairs)) if i not in test | validation], sorted(validation), sorted(test)


def test_the_split_from_hash_arrays_is_the_sorted_split_of_before():
    rng = random.Random(7)
    words = ["cell", "café", "tumour", "β-blocker", "dose", "rat", "κ", "renal"]
    for n in (5, 60, 1000):
        pairs = [(" ".join(rng.choices(words, k=3)), " ".join(rng.choices(words, k=6))) for _ in range(n)]
        pairs += pairs[: n // 10]  # duplicates: equal hashes keep their input order
        for asked in ((256, 256), (3, 7), (0, 0)):
            split = split_indices(pairs, *asked)
            assert (split.train.tolist(), split.validation.tolist(), split.test.tolist()) == \
                sorted_split(pairs, *asked), (n, asked)


def test_a_split_with_its_own_thresholds_is_the_fresh_split_again():
    rng = random.Random(3)
    words = ["cell", "tumour", "dose", "rat", "renal"]
    for n in (5, 60, 1000):
        pairs = [(" ".join(rng.choices(words, k=2)), " ".join(rng.choices(words, k=3))) for _ in range(n)]
        pairs += pairs[: n // 3]  # many identical pairs: equal hashes on either side of each threshold
        hashes = text_hashes("\x1f".join(p) for p in pairs)
        for asked in ((256, 256), (3, 7), (0, 5), (9, 0)):
            fresh = split_by_hash(hashes, *asked)
            again = split_by_hash(hashes, *asked, fresh.ends)
            assert [a.tolist() for a in (again.train, again.validation, again.test)] == \
                [a.tolist() for a in (fresh.train, fresh.validation, fresh.test)], (n, asked)
            assert again.ends == fresh.ends


def corpus(start, n):
    return [(f"query {i} on the kidney", f"document {i} on the kidney") for i in range(start, start + n)]


def test_a_growing_corpus_keeps_every_earlier_test_pair_and_its_sets_grow_with_it():
    """Ten updates of 5 % new pairs each, each deleting two pairs (one held out): every held-out
    pair still in the corpus stays in its set, the new pairs join by the recorded thresholds, and
    each set keeps the share of the corpus the first split gave it."""
    pairs, kept, n_test, n_validation = corpus(0, 20_000), Kept(), 400, 300
    first, earlier = None, {}
    rng = random.Random(5)
    for tick in range(11):
        hashes = text_hashes("\x1f".join(p) for p in pairs)
        split = split_by_hash(hashes, n_test, n_validation, kept)
        sets = {name: {pairs[i] for i in getattr(split, name)} for name in ("test", "validation")}
        for name, held in earlier.items():
            assert held & set(pairs) <= sets[name], (tick, name)  # nothing held out leaves its set
        if first is None:  # a fresh split: exactly the sizes asked
            first, kept = {name: len(held) for name, held in sets.items()}, split.ends
            assert first == {"test": n_test, "validation": n_validation}
        grown = len(pairs) / 20_000
        for name, held in sets.items():  # the same share of the corpus, within binomial noise
            expected = first[name] * grown
            assert abs(len(held) - expected) < 4 * expected ** 0.5 + 1, (tick, name, len(held), expected)
        assert not sets["test"] & sets["validation"]
        assert split_by_hash(hashes, n_test, n_validation, kept).test.tolist() == split.test.tolist()  # stable
        earlier = sets
        gone = {rng.choice(sorted(sets["test"])), pairs[rng.randrange(len(pairs))]}
        pairs = [p for p in pairs if p not in gone]
        new = corpus(100_000 + 1_000 * tick, 1_000)
        pairs = pairs[:len(pairs) // 2] + new + pairs[len(pairs) // 2:]  # new pairs anywhere in input order
    assert len(sets["test"]) > n_test * 1.3  # the set grew with the corpus: about 1.5x


def test_recorded_thresholds_hold_at_most_a_fifth_of_a_shrunken_corpus():
    hashes = text_hashes("\x1f".join(p) for p in corpus(0, 1000))
    ends = split_by_hash(hashes, 150, 100).ends
    few = hashes[np.sort(np.argsort(hashes)[:300])]  # left: the 250 held-out pairs and 50 others
    split = split_by_hash(few, 150, 100, ends)  # the thresholds alone would hold out 150 and 100 of 300
    ordered = np.sort(few)
    assert set(few[split.test]) == set(ordered[:60])  # a fifth: the lowest of the recorded test pairs
    assert set(few[split.validation]) == set(ordered[150:150 + 48])  # a fifth of the rest, from the validation set


def test_a_threshold_counts_identical_pairs_as_the_split_took_them():
    ordered = np.array([1, 5, 5, 5, 9], dtype=np.uint64)
    assert Threshold.after(ordered, 3) == Threshold(5, 2) and Threshold(5, 2).count(ordered) == 3
    assert Threshold(5, 2).count(ordered[:2]) == 2 and Threshold(0, 0).count(ordered) == 0
    assert Threshold(7, 1).count(ordered) == 4  # a threshold between hashes: every pair below it


def test_the_test_sets_change_counts_pairs_added_and_gone():
    previous, current = np.array([1, 2, 3], dtype=np.uint64), np.array([2, 3, 4, 5], dtype=np.uint64)
    assert held_out_change(previous, current) == {"pairs": 4, "added": 2, "gone": 1, "previous": 3}
    assert held_out_change(None, current) == {"pairs": 4, "added": None, "gone": None, "previous": None}


def rows_with_negatives(n=60):
    """(query, document, *negatives) rows: negatives that are other rows' documents, and texts that
    are no row's document (repeated), some of which are held-out documents."""
    docs = [f"document {i} on the kidney" for i in range(n)]
    return [(f"query {i}", docs[i], docs[(i + 1) % n], f"outside text {i % 4}", docs[(i * 7) % n])
            for i in range(n)]


def old_split(rows, n_test, n_validation, pool):
    """What the trainer read before: lists of texts, held-out documents dropped from the negatives
    by text, the probe over every training document."""
    pairs = [r[:2] for r in rows]
    train_idx, validation_idx, test_idx = sorted_split(pairs, n_test, n_validation)
    held = {rows[i][1] for i in (*validation_idx, *test_idx)}
    train = [(*rows[i][:2], *(n for n in rows[i][2:] if n not in held)) for i in train_idx]
    probe = RetrievalProbe.from_pairs([r[:2] for r in train], [pairs[i] for i in validation_idx], pool)
    return train, probe


def test_split_examples_reads_what_the_lists_held(tmp_path):
    rows = rows_with_negatives()
    data = PairSet.of(rows)
    train, probe = split_examples(data, data.table.to_batches, 6, 6, 20)
    expected_train, expected_probe = old_split(rows, 6, 6, 20)
    assert [train.example(i) for i in range(len(train))] == expected_train
    assert sum(len(e) - 2 for e in expected_train) < 3 * len(expected_train)  # held-out documents were dropped
    assert probe == expected_probe
    assert train.negatives_per_pair() == sum(len(e) - 2 for e in expected_train) / len(expected_train)
    assert split_examples(data, data.table.to_batches, 6, 0, 20)[1] is None


def test_negatives_are_row_references_and_a_subset_copies_no_text():
    rows = rows_with_negatives()
    data = PairSet.of(rows)
    documents = data.table.column("document").to_pylist()
    assert len(documents) == len(rows) + 4 and len(set(documents)) == len(documents)  # each text once
    assert data.table.column("query").null_count == 4  # the outside texts: rows of their own, no query
    assert data.table.column("negatives")[0].as_py() == [1, len(rows), 0]
    assert [data.example(i) for i in range(len(rows))] == rows
    sub = data.subset(np.array([5, 2]))
    assert sub.table is data.table and sub.rows.tolist() == [5, 2] and sub.example(1) == rows[2]
    skipped = sub.skipping(np.isin(np.arange(data.table.num_rows), [3]))  # row 3's document held out
    assert skipped.example(1) == (*rows[2][:2], *rows[2][3:])
    assert not data.has_margins
    refs = data.table.column("negatives").to_pylist()
    labelled = PairSet(data.table.append_column("margins", pa.array(
        [[10.0 * r + j for j in range(len(n))] for r, n in enumerate(refs)], pa.list_(pa.float32()))))
    assert labelled.has_margins and labelled.margins(2) == [20.0 + j for j in range(len(refs[2]))]
    held_out = labelled.subset(np.array([5, 2])).skipping(np.isin(np.arange(data.table.num_rows), [3]))
    kept = [j for j, n in enumerate(refs[2]) if n != 3]  # the margins of the negatives example() still gives
    assert held_out.margins(1) == [20.0 + j for j in kept] and len(kept) == len(held_out.example(1)) - 2


def test_a_pair_set_reads_a_memory_mapped_table_without_allocating(tmp_path):
    rows = [(f"query {i}", f"document {i} " + "x" * 2000, f"document {i + 1} " + "x" * 2000) for i in range(1500)]
    path = tmp_path / "examples.arrow"
    table = PairSet.of(rows).table
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    del table
    before = pa.total_allocated_bytes()
    data = PairSet(pa.ipc.open_file(pa.memory_map(str(path))).read_all())
    assert data.example(1498) == rows[1498] and len(data) == 1500
    assert path.stat().st_size > 3_000_000 and pa.total_allocated_bytes() - before < 100_000


def test_the_streamed_heldout_task_is_the_one_the_lists_gave(tmp_path):
    """Evaluation's held-out task and the export check read their pairs in two streamed passes;
    the test pairs and distractors are those of split_heldout and retrieval_data over the whole list."""
    import json

    from mosaic_core.trainer.heldout import heldout_split, retrieval_data, split_heldout
    from storage.pairs_io import pair_batches, read_pairs

    rng = random.Random(3)
    words = ["cell", "tumour", "dose", "rat", "renal", "β-blocker"]
    docs = [" ".join(rng.choices(words, k=8)) for _ in range(40)]
    lines = [json.dumps({"q": f"q {i} " + rng.choice(words), "d": rng.choice(docs)}) for i in range(300)]
    lines[5] = json.dumps({"q": "", "d": "a document without a query"})  # unusable: counted, skipped
    lines[9] = "not json"
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    pairs, _ = read_pairs(str(path), "q", "d")
    train, expected = split_heldout(pairs, 25)
    corpus, _, _ = retrieval_data(train, expected, 15)
    skipped: dict[str, int] = {}
    test, distractors, n = heldout_split(lambda: pair_batches(str(path), "q", "d", skipped), 25, 15)
    assert n == len(pairs) == 298 and test == expected
    assert [c["text"] for c in corpus] == list(dict.fromkeys([*(d for _, d in test), *distractors]))
    assert skipped == {"unusable": 2, "invalid_json": 2}  # two passes, one row and one line each


def test_the_validation_task_is_the_retrieval_a_stage_validates_on():
    """The run chooses between the adapted model and the control on the pairs a stage validates on."""
    from mosaic_core.trainer.heldout import heldout_split

    rng = random.Random(5)
    docs = [f"document {i} on " + " ".join(rng.choices(["renal", "cell", "dose"], k=4)) for i in range(120)]
    pairs = [(f"query {i}", rng.choice(docs)) for i in range(400)]
    data = PairSet.of(pairs)
    _, probe = split_examples(data, data.table.to_batches, 30, 20, 50)
    held, distractors, n = heldout_split(data.table.to_batches, 30, 50, 20, "validation")
    assert n == 400 and RetrievalProbe.with_distractors(held, distractors) == probe
    test, _, _ = heldout_split(data.table.to_batches, 30, 50)
    assert not set(test) & set(held)  # the test pairs are never the validation pairs


def test_extra_pairs_join_the_training_pairs_and_keep_their_own_negatives():
    rows = rows_with_negatives()
    data = PairSet.of(rows)
    train, _ = split_examples(data, data.table.to_batches, 6, 6, 20)
    extra = PairSet.of([("zorvatide", "a drug"), ("What is keltrase?", "an enzyme", "a drug")])
    joined = train.joined(extra)
    assert len(joined) == len(train) + 2
    assert [joined.example(i) for i in range(len(train))] == [train.example(i) for i in range(len(train))]
    assert joined.example(len(train)) == ("zorvatide", "a drug")
    assert joined.example(len(train) + 1) == ("What is keltrase?", "an enzyme", "a drug")  # moved with its rows
    assert joined.skip[: data.table.num_rows].tolist() == train.skip.tolist()  # held-out documents still skipped
    labelled = PairSet(data.table.append_column("margins", pa.array(
        [[0.5] * len(n) for n in data.table.column("negatives").to_pylist()], pa.list_(pa.float32()))))
    margins = labelled.joined(extra).margins(len(labelled) + 1)  # no teacher margins for the extra pairs: NaN
    assert len(margins) == 1 and np.isnan(margins[0])
