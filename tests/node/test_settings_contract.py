"""The node settings contract is one table: clusterkit_node/settings.py, which the CLI checks specs against,
and the bash statement of it in bootstrap_scripts/enroot.sh, which the nodes check their Args with.

Real: bash sources the real enroot.sh and its own `[[ =~ ]]` (POSIX ERE) judges each value; the real
mksquashfs (squashfs-tools, as enroot calls it) judges the squash options ClusterKit accepts or refuses.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit_node import settings

REPO = Path(__file__).resolve().parents[2]
ENROOT_SH = REPO / "bootstrap_scripts/enroot.sh"


def _bash_tables() -> dict[str, dict[str, str]]:
    script = f"""
set -euo pipefail
source {ENROOT_SH}
for table in CK_DEFAULTS CK_PATTERNS CK_HINTS; do
  declare -n t="$table"
  for k in "${{!t[@]}}"; do printf '%s\\t%s\\t%s\\n' "$table" "$k" "${{t[$k]}}"; done
  unset -n t
done
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30).stdout
    tables: dict[str, dict[str, str]] = {"CK_DEFAULTS": {}, "CK_PATTERNS": {}, "CK_HINTS": {}}
    for line in out.splitlines():
        table, key, value = line.split("\t", 2)
        tables[table][key] = value
    return tables


def test_enroot_sh_states_the_same_table() -> None:
    tables = _bash_tables()
    keys = {s.key for s in settings.SETTINGS}
    assert set(tables["CK_DEFAULTS"]) == set(tables["CK_PATTERNS"]) == set(tables["CK_HINTS"]) == keys
    for s in settings.SETTINGS:
        assert tables["CK_DEFAULTS"][s.key] == s.default, s.key
        assert tables["CK_PATTERNS"][s.key] == f"^{s.pattern}$", s.key
        assert tables["CK_HINTS"][s.key] == s.hint, s.key


VALUES = {
    "CK_STORE": ["/fsx/containers", "/fsx/a.b/c_d-e", "/fsx/../etc", "/fsx/.hidden", "/fsx/con tainers",
                 "/fsx/containers\n", "/fsx/containers\nCK_OS=rhel8", "fsx/containers", "/fsx//containers",
                 "/fsx/$(id)", "/fsx/c;rm", "/"],
    "CK_CLUSTER": ["demo", "Demo-1", "demo\n", "1demo", "de mo", "a" * 60, "a" * 61],
    "ENROOT_SQUASH_OPTIONS": [settings.DEFAULT_SQUASH_OPTIONS, "-comp zstd\n", "-comp zstd;id", "-comp $(id)",
                              "comp zstd", "-b 1M -no-fragments"],
    "ENROOT_TRANSFER_RETRIES": ["0", "5", "999", "1000", "-1", "5\n", ""],
    "ENROOT_TRANSFER_TIMEOUT": ["0", "600", "999999", "1000000"],
    "CK_ECR_REGISTRIES": ["", "123456789012.dkr.ecr.us-east-1.amazonaws.com",
                          "123456789012.dkr.ecr.us-east-1.amazonaws.com 210987654321.dkr.ecr.eu-west-1.amazonaws.com",
                          "evil.example.com", "123456789012.dkr.ecr.us-east-1.amazonaws.com\n"],
    "ENROOT_MAX_PROCESSORS": ["", "1", "9999", "0", "10000"],
    "CK_UNLOCKED_IMAGES": ["refuse", "import", "Refuse", "import "],
}


def _bash_accepts(key: str, values: list[str]) -> list[bool]:
    script = (f'source {ENROOT_SH}\nfor v in "$@"; do '
              f'if [[ "$v" =~ ${{CK_PATTERNS[{key}]}} ]]; then echo 1; else echo 0; fi; done')
    out = subprocess.run(["bash", "-c", script, "bash", *values], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    return [line == "1" for line in out.splitlines()]


@pytest.mark.parametrize("key", sorted(VALUES))
def test_bash_and_python_judge_every_value_alike(key: str) -> None:
    values = VALUES[key]
    python = [settings.BY_KEY[key].problem(v) is None for v in values]
    assert _bash_accepts(key, values) == python
    assert any(python) and not all(python)


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
    for path in sorted((REPO / "clusterkit_node").glob("*.py")):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
