"""The smallest valid spec the tests build on, written once (it was pasted into five test files).

One GPU queue of p5.48xlarge in us-east-1a, nothing else: every other field takes its default, so a test
appends or replaces exactly the part it is about and reads as that part. Text, not a dataclass: the tests
that use it go through the real YAML reader, positions included.
"""
from __future__ import annotations

BASE_SPEC = """\
name: t
region: us-east-1
availability_zone: us-east-1a
queues:
  - name: gpu
    compute_resources:
      - name: p5
        instance_type: p5.48xlarge
        max: 2
"""


def with_images(*images: tuple[str, str]) -> str:
    """BASE_SPEC plus ``containers.images`` entries given as (name, uri)."""
    lines = "".join(f"    - name: {name}\n      uri: {uri}\n" for name, uri in images)
    return f"{BASE_SPEC}containers:\n  images:\n{lines}"
