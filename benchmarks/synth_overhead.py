#!/usr/bin/env python3
"""How much does ClusterKit add to a CDK synth, and how fast is spec validation?

Times, in one run and alternating so machine noise hits both alike:
  * `cdk synth` of the demo app (all three stacks, cdk-nag on) — what `make synth` does;
  * `cdk synth` of a bare CDK app holding one VPC, with the same pins (aws-cdk-lib, CDK CLI);
  * `python -m clusterkit validate` of every shipped spec (never imports aws_cdk).
Prints a markdown table with medians, the ratio docs/benchmarks.md quotes, the machine and the date.
Run from the repo root after `make synth`: `.venv/bin/python benchmarks/synth_overhead.py --rounds 5`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BARE_APP = """\
import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2

app = cdk.App()
stack = cdk.Stack(app, "Bare", env=cdk.Environment(region="us-east-1"))
ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a"])
app.synth()
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, AWS_EC2_METADATA_DISABLED="true", JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="1",
               AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    env.pop("AWS_PROFILE", None)
    return env


def _time(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=_env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cdk = str(REPO / "node_modules/.bin/cdk")
    python = str(REPO / ".venv/bin/python")
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp)
        (bare / "app.py").write_text(BARE_APP)
        (bare / "cdk.json").write_text('{"app": "%s app.py", "notices": false, "versionReporting": false, '
                                       '"context": {"cli-telemetry": false}}' % python)
        runs = {
            "cdk synth: demo (3 stacks, cdk-nag)": ([cdk, "synth", "--quiet", "-o", f"{tmp}/out-demo"], REPO),
            "cdk synth: bare app (1 VPC)": ([cdk, "synth", "--quiet", "-o", f"{tmp}/out-bare"], bare),
            "clusterkit validate (all specs)": ([python, "-m", "clusterkit", "validate"], REPO),
        }
        for cmd, cwd in runs.values():  # warm-up: first node/jsii start, pip caches, page cache
            _time(cmd, cwd)
        times: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(args.rounds):
            for label, (cmd, cwd) in runs.items():
                times[label].append(_time(cmd, cwd))
    med = {label: statistics.median(values) for label, values in times.items()}
    demo, bare_t = med["cdk synth: demo (3 stacks, cdk-nag)"], med["cdk synth: bare app (1 VPC)"]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"Machine: {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}; "
          f"date {dt.date.today().isoformat()}; {args.rounds} alternating rounds, medians.\n")
    print("| command | median s | min s | max s |")
    print("|---|---|---|---|")
    for label, values in times.items():
        print(f"| {label} | {med[label]:.2f} | {min(values):.2f} | {max(values):.2f} |")
    print(f"\ndemo synth / bare synth = {demo / bare_t:.2f}x (goal <= 1.5x); "
          f"validate all specs = {med['clusterkit validate (all specs)']:.2f} s (goal < 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
