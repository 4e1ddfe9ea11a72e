"""ParallelCluster's own verdicts: ``check`` runs PC 3.16.1's schema, validators and update policies inside
``.venv-pcluster`` (with ``policies``, ``tokens``, ``capacity_reservations`` and the simulated AWS of
``moto_world``), and ``runner`` calls it from ClusterKit's venv.

The modules that run inside ``.venv-pcluster`` import only each other and the standard library (and PC).

May import: spec
"""
