"""The ``clusterkit`` command: ``main`` builds the parser from one module per command (``*_command``, listed in
``command_table`` and imported only when it runs) and turns every ``ClusterKitError`` into one line and exit 2;
``machine_output`` holds the JSON shapes. Imports nothing: the console script imports this first.

May import: spec, catalog, images, effective, rules, pipeline, artifacts, render, cost, diff, pcluster, deployed
"""
