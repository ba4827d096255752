"""A full disk is said in one line, whatever the writer that hit it reported, and a failed write
leaves no partial file behind."""

import errno
from pathlib import Path

import pytest
import torch

from mosaic_core.files import replacing
from storage import space
from storage.space import NoSpace, check_space, space_problem


def test_enospc_under_a_written_root_names_the_root_and_its_free_space(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    exc = OSError(errno.ENOSPC, "No space left on device", str(root / "models" / "stage1" / "x.pt"))
    message = space_problem(exc, [root])
    assert message.startswith(f"data root {root}: no space left on its device (")
    assert "MiB free of" in message and "rerun keeps every step" in message
    wrapped = RuntimeError("a flow failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert space_problem(wrapped, [root]) is not None
    assert space_problem(OSError(errno.ENOSPC, "full"), []) is None  # no root written: nothing to name


def test_a_writer_that_hides_the_cause_is_read_by_the_free_space(tmp_path, monkeypatch):
    """torch.save on a full disk says only 'unexpected pos'; the free space says why."""
    torn = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 120128 vs 120020")
    assert space_problem(torn, [tmp_path]) is None  # this disk has room: another failure
    monkeypatch.setattr(space, "free_bytes", lambda path: (3 * 2**20, 120 * 2**20))
    assert space_problem(torn, [tmp_path]) == (
        f"data root {tmp_path}: no space left on its device (3 MiB free of 120 MiB). Free space there or pass a "
        "data root on a larger disk; a rerun keeps every step that finished")


def test_the_need_is_checked_up_front(tmp_path):
    check_space(tmp_path, 1)
    with pytest.raises(NoSpace, match=r"needs about [\d,]+ MiB, [\d,]+ MiB free of"):
        check_space(tmp_path / "not" / "yet", 1 << 60)


def test_a_write_that_fails_for_space_removes_its_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "distill-state.pt"

    def full(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"x" * 1000)  # part of it was written
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1000 vs 900")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(RuntimeError, match="unexpected pos"), replacing(target) as tmp:
        torch.save({"rows": torch.zeros(3)}, tmp)
    assert list(tmp_path.iterdir()) == []


def test_a_run_whose_models_would_not_fit_is_refused_before_it_starts(tmp_path, monkeypatch):
    from builders import tiny_bert

    from mosaic_core.config import PipelineConfig
    from tasks.space import check_disk, disk_need, folder_bytes

    base = tiny_bert(tmp_path / "base")
    cfg = PipelineConfig(base_model=str(base), vocab={"base_model": str(base)})
    root = tmp_path / "root"
    need = disk_need(cfg, str(root))
    # stage 1, the warm-up (counted: the estimate does not load the base to ask whether it ships an
    # MLM head), the paper preset's two stages, the control, the published copy: each the base's size
    assert need == int(1.2 * folder_bytes(base) * 6)
    assert disk_need(cfg.model_copy(update={"control": "none"}), str(root)) == int(1.2 * folder_bytes(base) * 5)
    monkeypatch.setattr(space, "free_bytes", lambda path: (need - 1, 10 * need))
    with pytest.raises(NoSpace, match=rf"data root {root.resolve()}: no space left on its device \(needs about"):
        check_disk.fn(cfg, str(root))
    (root / "models" / "stage1").mkdir(parents=True)
    (root / "models" / "stage1" / "model.safetensors").write_bytes(b"\0" * folder_bytes(base))
    assert disk_need(cfg, str(root)) == need - folder_bytes(base)  # a rerun reuses what is there
    (root / "models" / "examples").mkdir()
    (root / "models" / "examples" / "pairs-1.arrow").write_bytes(b"\0" * need)  # data, not a model
    assert disk_need(cfg, str(root)) == need - folder_bytes(base)
    check_disk.fn(cfg, str(root))


def test_an_output_folder_outside_any_root_is_named_as_such(tmp_path, monkeypatch):
    monkeypatch.setattr(space, "WRITTEN", {})
    monkeypatch.setattr(space, "free_bytes", lambda path: (0, 60 * 2**20))
    torn = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 51107840 vs 51107728")
    assert space_problem(torn) is None  # nothing written yet: no folder to name
    space.writing(tmp_path / "stage1")
    assert space_problem(torn).startswith(f"output folder {tmp_path / 'stage1'}: no space left on its device")
    assert "pass an output folder on a larger disk" in space_problem(torn)
