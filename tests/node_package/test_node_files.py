"""The node tools' file writes (clusterkit_node/node/node_files.py): enroot.sh's rules for ck_write_file,
ck_ensure_dir and ck_remove_file, so a render moved from bash to Python writes the same files and log lines."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from clusterkit_node.node.node_files import NodeFiles


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def test_write_creates_the_file_with_its_mode_a_trailing_newline_and_no_temp_file_left(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    files = NodeFiles(root=str(tmp_path))
    files.write("/etc/unit", 0o644, "a\nb")
    assert (tmp_path / "etc/unit").read_bytes() == b"a\nb\n"
    assert mode(tmp_path / "etc/unit") == 0o644
    assert files.log == ["INFO wrote /etc/unit (mode 0644)"] and files.changed
    assert os.listdir(tmp_path / "etc") == ["unit"]


def test_write_leaves_a_right_file_alone_and_only_fixes_a_wrong_mode(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    NodeFiles(root=str(tmp_path)).write("/etc/unit", 0o644, "x\n")
    before = (tmp_path / "etc/unit").stat().st_mtime_ns
    same = NodeFiles(root=str(tmp_path))
    same.write("/etc/unit", 0o644, "x")
    assert same.log == [] and not same.changed
    assert (tmp_path / "etc/unit").stat().st_mtime_ns == before
    (tmp_path / "etc/unit").chmod(0o600)
    fixed = NodeFiles(root=str(tmp_path))
    fixed.write("/etc/unit", 0o644, "x\n")
    assert fixed.log == ["INFO fixed mode of /etc/unit to 0644"] and fixed.changed
    assert mode(tmp_path / "etc/unit") == 0o644 and (tmp_path / "etc/unit").stat().st_mtime_ns == before


def test_write_replaces_a_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("x\n")
    (tmp_path / "etc/unit").symlink_to(elsewhere)
    files = NodeFiles(root=str(tmp_path))
    files.write("/etc/unit", 0o644, "x\n")
    assert not (tmp_path / "etc/unit").is_symlink() and (tmp_path / "etc/unit").read_text() == "x\n"
    assert elsewhere.read_text() == "x\n" and files.log == ["INFO wrote /etc/unit (mode 0644)"]


def test_ensure_dir_creates_then_fixes_the_mode(tmp_path: Path) -> None:
    files = NodeFiles(root=str(tmp_path))
    files.ensure_dir("/var/lib/ck", 0o700)
    assert mode(tmp_path / "var/lib/ck") == 0o700
    files.ensure_dir("/var/lib/ck", 0o700)
    (tmp_path / "var/lib/ck").chmod(0o755)
    files.ensure_dir("/var/lib/ck", 0o700)
    assert files.log == ["INFO created /var/lib/ck (mode 0700)", "INFO fixed mode of /var/lib/ck to 0700"]
    assert mode(tmp_path / "var/lib/ck") == 0o700


def test_remove_takes_files_and_dangling_links_and_ignores_absent_ones(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/unit").write_text("x\n")
    (tmp_path / "etc/link").symlink_to(tmp_path / "nowhere")
    files = NodeFiles(root=str(tmp_path))
    for name in ("unit", "link", "absent"):
        files.remove(f"/etc/{name}")
    assert os.listdir(tmp_path / "etc") == []
    assert files.log == ["INFO removed /etc/unit", "INFO removed /etc/link"]
    nothing = NodeFiles(root=str(tmp_path))
    nothing.remove("/etc/unit")
    assert nothing.log == [] and not nothing.changed
