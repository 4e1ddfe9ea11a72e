"""Each node command's lines name that command (issue 35, item 6): before, every one of them (``verify`` on a
compute node's boot, ``gc``, ``nccl-check`` in a job) logged as ``image_sync``, so a node's log blamed the image
sync for lines it never wrote. ``sync`` keeps ``image_sync``, its unit's name (docs/troubleshooting.md).

In process, through the command table (``clusterkit_node.commands.main``) as the zipapp runs it.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit_node.commands import main

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def lines_of(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, (captured.out + captured.err).splitlines()


def test_each_command_logs_under_its_own_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "images.lock"
    lock.write_text('{"cluster": "t", "images": [], "lock_version": 1}\n', encoding="utf-8")
    code, lines = lines_of(capsys, "verify", "--store", str(tmp_path / "none"), "--lock", str(lock))
    assert code == 1
    assert len(lines) == 1 and re.fullmatch(  # "verify" once: the module's own "verify: " is not repeated
        rf"{TIME} verify: error: image store {tmp_path}/none is not a directory \(is FSx mounted at {tmp_path}\?\)",
        lines[0]), lines
    assert lines_of(capsys, "gc", "--store", str(tmp_path / "none")) == (2, [
        f"gc: {tmp_path}/none: no such store directory (--store is the image store, e.g. /fsx/containers)"])
    code, lines = lines_of(capsys, "nccl-check", str(tmp_path / "missing.log"))
    assert (code, lines) == (2, [f"nccl-check: cannot read {tmp_path}/missing.log: No such file or directory"])


def test_the_sync_keeps_its_units_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = lines_of(capsys, "sync", "--lock", str(tmp_path / "none.lock"), "--store", str(tmp_path))
    assert (code, lines) == (2, [f"image_sync: {tmp_path}/none.lock: cannot read image lock: No such file or "
                                 "directory (is --lock right?)"])
