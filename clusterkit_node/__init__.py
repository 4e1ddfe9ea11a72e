"""ClusterKit's node side: what runs on (or is decided for) the cluster nodes, stdlib only, Python 3.9+.

Shipped to the nodes as one zipapp (``clusterkit_node.pyz``, built by clusterkit/artifacts/bundle.py; entry point
``__main__.py``). The CLI imports its definitions (``settings``, ``sizing``, ``compat``) so it can never
accept a value a node refuses; nothing here imports the CLI side.
"""
