"""The embedding cache finds a stored pair by its content hash, and only in a file made the same way."""

import io

import numpy as np

from storage.embeddings import load_embeddings, save_embeddings, stored_rows


def test_a_stored_pair_is_found_by_its_hash_only_in_a_file_made_the_same_way(tmp_path):
    path = tmp_path / "part.npz"
    queries, documents = np.arange(12, dtype=np.float32).reshape(4, 3), -np.arange(12, dtype=np.float32).reshape(4, 3)
    save_embeddings(path, queries, documents, np.array([40, 10, 30, 10], dtype=np.uint64), "encoder-a")
    found, q, d = stored_rows(path, np.array([30, 99, 10, 40], dtype=np.uint64), "encoder-a")
    assert found[1] == -1 and found[0] == 2 and found[3] == 0 and found[2] in (1, 3)  # an identical pair: either row
    assert (q[found[[0, 2, 3]]] == queries[[2, found[2], 0]]).all() and (d == documents).all()
    assert (load_embeddings(path)[0] == queries).all()
    assert (stored_rows(path, np.array([30], dtype=np.uint64), "encoder-b")[0] == -1).all()  # other weights or code
    assert (stored_rows(tmp_path / "none.npz", np.array([30], dtype=np.uint64), "encoder-a")[0] == -1).all()
    buf = io.BytesIO()  # a file written before the hashes were stored
    np.savez(buf, queries=queries.astype(np.float16), documents=documents.astype(np.float16))
    (tmp_path / "old.npz").write_bytes(buf.getvalue())
    assert (stored_rows(tmp_path / "old.npz", np.array([30], dtype=np.uint64), "encoder-a")[0] == -1).all()
