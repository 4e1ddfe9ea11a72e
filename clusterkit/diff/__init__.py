"""``clusterkit diff``: specs, rendered configs and locks at a git ref against the work tree (``sources``,
``structure``), ParallelCluster's update impact (``impact``), the report (``report``), its text and JSON
forms (``text``, ``json_output``), the ``--fail-on`` gate (``gate``) and both sides' cost (``cost_delta``).

May import: spec, images, effective, cost, pcluster
"""
