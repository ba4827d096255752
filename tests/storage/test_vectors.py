"""The evaluation's embedding cache (storage.vectors): a text's vector comes back as it was stored,
a file that does not read is dropped, a model folder is named by what shapes its embeddings."""

import numpy as np

from storage.vectors import TaskVectors, keep_models, model_folder, text_hash


def test_vectors_round_trip_by_text_and_only_texts_are_cached(tmp_path):
    store = TaskVectors(tmp_path / "heldout" / "query")
    store.load()
    items = [{"id": "q0", "text": "a"}, {"id": "q1", "text": "b"}, {"id": "q2", "image": object()}]
    store.add(items, np.arange(6, dtype=np.float32).reshape(3, 2))
    store.save()
    again = TaskVectors(tmp_path / "heldout" / "query")
    again.load()
    assert again.get_vector({"id": "other id", "text": "b"}).tolist() == [2.0, 3.0]  # by its text, not its id
    assert {"text": "a"} in again and {"text": "c"} not in again and items[2] not in again
    assert text_hash({"title": "x", "text": "y"}) != text_hash({"title": "", "text": "xy"})


def test_a_damaged_file_is_dropped_and_encoded_again(tmp_path):
    folder = tmp_path / "t" / "document"
    folder.mkdir(parents=True)
    (folder / "vectors.npz").write_bytes(b"not a zip")
    store = TaskVectors(folder)
    store.load()
    assert store.get_vector({"text": "a"}) is None
    store.add([{"text": "a"}], np.ones((1, 2), np.float32))
    store.save()
    (reread := TaskVectors(folder)).load()
    assert reread.get_vector({"text": "a"}).tolist() == [1.0, 1.0]


def test_model_folders_differ_by_settings_and_only_the_kept_ones_stay(tmp_path):
    a = model_folder(tmp_path, "fp1", {"prompts": None, "dim": None})
    b = model_folder(tmp_path, "fp1", {"prompts": {"query": "q: "}, "dim": None})
    c = model_folder(tmp_path, "fp2", {"prompts": None, "dim": None})
    assert len({a, b, c}) == 3 and a.parent == b.parent == c.parent
    for f in (a, b, c):
        f.mkdir(parents=True)
    assert keep_models(tmp_path, [a]) == sorted([b.name, c.name]) and a.is_dir() and not b.exists()
