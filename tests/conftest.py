"""Suite-wide setup: no test may reach AWS or the internet, whatever the machine's environment holds; the
oldest Python the node package supports, for the tests that run it there; and every test's tier marker
(tests/tiers.py: a file in no tier is a collection error, so a new folder has to choose one), and the order
the tiers are handed to the workers in."""
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
    os.environ.pop(key, None)
os.environ.update({
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    # jsii silences its end-of-life banner only when this names the running node major version.
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": subprocess.run(
        ["node", "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True).stdout.strip(),
    "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
})


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"ck_{name}", Path(__file__).resolve().parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_tiers = _load("tiers")


# The order tests are handed out in (`make test`: --dist loadscope gives each worker whole modules, in collection
# order): the slow tiers first, so their long modules start at once and the many short ones fill the end of the run
# instead of one long module holding it up while the other worker idles; the clusters (multi-node first) lead the
# system tier. Otherwise the collection order.
SCHEDULE = ("system", "synth", "pcluster", "node", "process", "moto", "unit")
LEADING_FOLDERS = ("multinode", "real_runtime")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank: dict[int, int] = {}
    for item in items:
        tier = _tiers.tier_of(Path(str(item.fspath)))
        if tier is None:
            raise pytest.UsageError(f"{item.fspath}: in no test tier: add its folder to TIER_OF_FOLDER in "
                                    "tests/tiers.py")
        item.add_marker(getattr(pytest.mark, tier))
        folder = Path(str(item.fspath)).resolve().relative_to(_tiers.TESTS).parts[0]
        lead = LEADING_FOLDERS.index(folder) if folder in LEADING_FOLDERS else len(LEADING_FOLDERS)
        rank[id(item)] = SCHEDULE.index(tier) * 10 + lead
    items.sort(key=lambda item: rank[id(item)])


def _oldest_python():
    return _load("oldest_python")


@pytest.fixture(scope="session")
def python39() -> str:
    """A real Python 3.9 interpreter (tests/oldest_python.py; `make test` provides one). Without one the test
    is skipped, except where CK_REQUIRE_PYTHON39=1 (CI): there it fails."""
    oldest = _oldest_python()
    found = oldest.find()
    if found is None:
        why = f"no Python 3.9 interpreter here (run `make python39`; tried {oldest.candidates() or 'nothing'})"
        if os.environ.get(oldest.REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    return found


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials anywhere boto3 looks (environment, files, instance metadata): a --from-aws run must
    fail with one line, never reach AWS."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
