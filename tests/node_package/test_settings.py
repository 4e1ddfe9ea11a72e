"""The node settings table (clusterkit_node/contract/settings.py) on its own: patterns, number limits, and the
mksquashfs options grammar, judged by the real mksquashfs (squashfs-tools, as enroot calls it).

(How the nodes parse Args against the table: test_node_args.py.)
"""
from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit_node.contract import settings

REPO = Path(__file__).resolve().parents[2]

# (value, accepted) per key: the values that once needed care (dot parts, line breaks, command substitution).
VALUES = {
    "CK_STORE": [("/fsx/containers", True), ("/fsx/a.b/c_d-e", True), ("/fsx/../etc", False),
                 ("/fsx/.hidden", False), ("/fsx/con tainers", False), ("/fsx/containers\n", False),
                 ("/fsx/containers\nCK_OS=rhel8", False), ("fsx/containers", False), ("/fsx//containers", False),
                 ("/fsx/$(id)", False), ("/fsx/c;rm", False), ("/", False)],
    "CK_CLUSTER": [("demo", True), ("Demo-1", True), ("demo\n", False), ("1demo", False), ("de mo", False),
                   ("a" * 60, True), ("a" * 61, False), ("d\u00e9mo", False)],
    "ENROOT_SQUASH_OPTIONS": [(settings.DEFAULT_SQUASH_OPTIONS, True), ("-comp zstd\n", False),
                              ("-comp zstd;id", False), ("-comp $(id)", False), ("comp zstd", False),
                              ("-b 1M -no-fragments", True)],
    "ENROOT_TRANSFER_RETRIES": [("0", True), ("5", True), ("999", True), ("1000", False), ("-1", False),
                                ("5\n", False), ("", False), ("\u0665", False)],
    "ENROOT_TRANSFER_TIMEOUT": [("0", True), ("600", True), ("999999", True), ("1000000", False)],
    "CK_ECR_REGISTRIES": [("", True), ("123456789012.dkr.ecr.us-east-1.amazonaws.com", True),
                          ("123456789012.dkr.ecr.us-east-1.amazonaws.com 210987654321.dkr.ecr.eu-west-1.amazonaws.com",
                           True),
                          ("evil.example.com", False), ("123456789012.dkr.ecr.us-east-1.amazonaws.com\n", False)],
    "ENROOT_MAX_PROCESSORS": [("", True), ("1", True), ("9999", True), ("0", False), ("10000", False)],
    "CK_UNLOCKED_IMAGES": [("refuse", True), ("import", True), ("Refuse", False), ("import ", False)],
}


@pytest.mark.parametrize("key", sorted(VALUES))
def test_patterns_judge_each_value(key: str) -> None:
    got = [(v, settings.BY_KEY[key].problem(v) is None) for v, _ in VALUES[key]]
    assert got == VALUES[key]


def test_store_refuses_dot_parts_and_line_breaks() -> None:
    store = settings.BY_KEY["CK_STORE"]
    assert store.problem("/fsx/containers") is None
    assert store.problem("/fsx/../etc") == "'/fsx/../etc' is refused by the nodes' check of CK_STORE"
    assert "'/fsx/containers\\nCK_OS=rhel8'" in str(store.problem("/fsx/containers\nCK_OS=rhel8"))


def test_max_digits() -> None:
    assert settings.max_digits("ENROOT_TRANSFER_RETRIES") == 999
    assert settings.max_digits("ENROOT_TRANSFER_TIMEOUT") == 999_999
    with pytest.raises(ValueError):
        settings.max_digits("CK_STORE")


ACCEPTED = [settings.DEFAULT_SQUASH_OPTIONS, "-comp zstd -Xcompression-level 22 -b 1M",
            "-comp gzip -Xcompression-level 9", "-comp lzo -noD", "-comp lz4 -Xhc", "-comp xz -Xbcj x86,arm",
            "-b 64k", "-b 131072",
            "-noI -noX -noF -no-duplicates -no-xattrs -always-use-fragments -no-exports -all-root",
            "-Xcompression-level 5", "-b 1M -b 128K"]
# (options, what ClusterKit says): each of these the real mksquashfs rejects too.
REFUSED_BY_BOTH = [
    ("-comp zstdd", "unknown compressor 'zstdd' (one of gzip, lzo, lz4, xz, zstd)"),
    ("-comp zstd -Xcompression-level 99", "-Xcompression-level 99 is outside 1..22 for zstd"),
    ("-comp zstd -Xcompression-level 0", "-Xcompression-level 0 is outside 1..22 for zstd"),
    ("-comp xz -Xcompression-level 3", "-Xcompression-level does not apply to xz (only zstd, gzip)"),
    ("-comp zstd -comp gzip", "two compressors, zstd and gzip"),
    ("-b 3K", "-b 3K is not a power of two between 4K and 1M"),
    ("-b 2M", "-b 2M is not a power of two between 4K and 1M"),
    ("-b", "-b needs a value"),
    ("-foo", "'-foo' is not a mksquashfs option ClusterKit passes (use -comp, -b, -X<compressor option> or a flag)"),
]
# Valid for mksquashfs but not what an image store should get (ClusterKit is stricter on purpose).
REFUSED_BY_CLUSTERKIT = ["-e foo", "-comp xz -Xdict-size 64K", "-processors 2", "-comp zstd -Xhc", "-comp zstd\n-b 1M",
                         "-comp zstd ; id"]


def _mksquashfs(tmp_path: Path, options: str) -> subprocess.CompletedProcess[str]:
    """mksquashfs exactly as enroot 4.1.2 calls it (src/docker.sh), options word-split."""
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "a").write_text("hello\n")
    out = tmp_path / "out.sqsh"
    out.unlink(missing_ok=True)
    return subprocess.run(["mksquashfs", str(tree), str(out), "-all-root", "-no-progress", "-processors", "1",
                           *options.split()], capture_output=True, text=True, timeout=60)


@pytest.fixture
def mksquashfs() -> None:
    if shutil.which("mksquashfs") is None:
        pytest.fail("mksquashfs missing: make test installs squashfs-tools (Debian package)")


@pytest.mark.parametrize("options", ACCEPTED)
def test_accepted_options_are_accepted_by_mksquashfs(mksquashfs, tmp_path: Path, options: str) -> None:
    assert settings.squash_options_problem(options) is None
    result = _mksquashfs(tmp_path, options)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("options", "message"), REFUSED_BY_BOTH)
def test_refused_options_are_refused_by_mksquashfs_too(mksquashfs, tmp_path: Path, options: str, message: str) -> None:
    assert settings.squash_options_problem(options) == message
    assert _mksquashfs(tmp_path, options).returncode != 0


@pytest.mark.parametrize("options", REFUSED_BY_CLUSTERKIT)
def test_options_clusterkit_refuses_on_purpose(options: str) -> None:
    assert settings.squash_options_problem(options) is not None


def test_node_package_is_python_3_9() -> None:
    """clusterkit_node ships to nodes whose oldest python3 is 3.9 (alinux2023, rhel9): a static check."""
    for path in sorted((REPO / "clusterkit_node").rglob("*.py")):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
