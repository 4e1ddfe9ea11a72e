"""TTL synths with the clock pinned through the ``deploy_time`` context, shared by this folder's tests."""
from __future__ import annotations

import pytest

DEPLOY_TIME = "2026-12-01T08:00:00Z"


@pytest.fixture(scope="session")
def synth_ttl(tmp_path_factory):
    """``synth_ttl(name, **context)`` -> (stacks, outdir); memoized per (name, context)."""
    import aws_cdk as cdk

    import app as cdk_app
    from clusterkit.pipeline.loader import load

    cache = {}

    def run(name: str, **context):
        key = (name, tuple(sorted(context.items())))
        if key not in cache:
            outdir = tmp_path_factory.mktemp(f"ttl-{name}")
            app = cdk.App(outdir=str(outdir), context={"deploy_time": DEPLOY_TIME, **context})
            stacks = cdk_app.build(app, load(name))
            app.synth()
            cache[key] = (stacks, outdir)
        return cache[key]

    return run
