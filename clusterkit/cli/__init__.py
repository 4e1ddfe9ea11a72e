"""The ``clusterkit`` command: ``main`` builds the parser from one module per command (``*_command``) and
turns every ``ClusterKitError`` into one line and exit 2; ``machine_output`` holds the JSON shapes.

May import: spec, catalog, images, effective, rules, pipeline, artifacts, render, cost, diff, pcluster, deployed
"""
