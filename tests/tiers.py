"""The test tiers: what each test needs to run, and so what it can prove (docs/testing.md "Test tiers").

Each test gets the pytest marker of its file's tier (tests/conftest.py): its folder's, or the file's own where a
folder mixes tiers. pyproject.toml registers the markers (--strict-markers); `make test-fast` runs the `unit`
tier's folders with ``-m unit``; `make test` and CI run every tier.
"""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Order: cheapest first. What each needs:
TIERS = {
    "unit": "Python only, in one interpreter (imports, never spawns): the spec reader and rules, effective spec, "
            "render, advice, cost, diff structure, doc links, the lock over loopback HTTP, the CLI in-process",
    "moto": "moto's stand-ins for AWS APIs (EC2 catalog snapshot, ECR, S3, CloudFormation, SSM)",
    "node": "the node package and bootstrap scripts as processes: the zipapp under python3 and a real 3.9, bash "
            "in a recording sandbox, shellcheck",
    "process": "what only a separate process shows: the console script, Ctrl-C and signals, a terminal (pty), "
               "bash/zsh completion, fresh interpreters (hash seeds, import side effects), ruff and mypy, pytest "
               "collecting a scratch suite",
    "synth": "aws-cdk-lib synth, cdk-nag, cfn-lint, Checkov (.venv-checkov) and the CDK CLI",
    "pcluster": "ParallelCluster 3.16.1's own schema, validators and update policies (.venv-pcluster)",
    "system": "root and real programs: Debian's Slurm, the real enroot + pyxis, squashfs-tools imports",
}
TIER_OF_FOLDER = {
    "advice": "unit", "cli": "unit", "contracts": "unit", "cost": "unit", "diff": "unit", "images": "unit",
    "render": "unit", "spec": "unit",
    "catalog": "moto", "export": "moto", "status": "moto",
    "compat": "node", "node": "node", "node_package": "node",
    "app": "synth", "stacks": "synth", "ttl": "synth",
    "pcluster": "pcluster",
    "image_sync": "system", "image_versions": "system", "multinode": "system", "real_runtime": "system",
    "slurm": "system",
}
# Files whose tier differs from their folder's, and what they run that the folder's others do not.
TIER_OF_FILE = {
    "diff/test_diff_cases.py": "pcluster",          # update policies from ParallelCluster's own schema
    "diff/test_diff_cli.py": "pcluster",
    "diff/test_diff_gate.py": "pcluster",
    "diff/test_diff_impact.py": "pcluster",
    "diff/test_diff_workflow.py": "pcluster",
    "diff/test_diff_stale_render.py": "pcluster",   # the CLI of a copy of the checkout, PC's update policies
    "diff/test_diff_platforms.py": "pcluster",
    "spec/test_aws_limits.py": "pcluster",          # ParallelCluster's validators draw the same lines
    "images/test_images_ecr.py": "moto",
    "cli/test_validate_aws.py": "moto",             # validate --aws against moto's EC2
    "cli/test_packaging.py": "synth",               # builds and installs a wheel with pip
    "cli/test_cdk_banner.py": "synth",              # runs the CDK CLI on the app (npx cdk ls)
    "cli/test_validate_simulated.py": "pcluster",   # validate --pcluster in .venv-pcluster
    "compat/test_compat_node_script.py": "node",
    # The unit tier imports, never spawns (tests/in_process.py runs the CLI in the interpreter); these must spawn.
    "cli/test_error_boundary.py": "process",        # Ctrl-C, closed pipes, read-only mounts, both entry points
    "cli/test_console_script.py": "process",        # the installed console script from any directory
    "cli/test_colour.py": "process",                # colour on a real terminal (pty)
    "cli/test_completion.py": "process",            # the generated script completed by bash, shellcheck
    "cli/test_completion_shells.py": "process",     # the CLI's script completed by bash and zsh
    "render/test_hash_seed.py": "process",          # interpreters with other hash seeds
    "contracts/test_typecheck.py": "process",       # mypy
    "contracts/test_lint.py": "process",            # ruff
    "contracts/test_tiers.py": "process",           # pytest on a scratch suite, make -n
    "contracts/test_fresh_imports.py": "process",   # what a fresh interpreter imports
    "cli/test_make_help.py": "process",             # make help
    "cli/test_user_specs_beside.py": "process",     # pytest in a copy of the checkout with a user's specs
    "spec/test_schema_ecma.py": "process",          # node's RegExp on the schema's patterns
    "node_package/test_imds_lock_netns.py": "system",  # root: iptables in a network namespace
}


def tier_of(path: Path) -> str | None:
    rel = path.resolve().relative_to(TESTS).as_posix()
    return TIER_OF_FILE.get(rel) or TIER_OF_FOLDER.get(rel.split("/", 1)[0])


def folders(tier: str) -> list[str]:
    """The folders holding the tier's tests (what `make test-fast` passes for ``unit``)."""
    return sorted({f for f, t in TIER_OF_FOLDER.items() if t == tier} |
                  {rel.split("/", 1)[0] for rel, t in TIER_OF_FILE.items() if t == tier})
