"""ClusterKit's node side: what runs on (or is decided for) the cluster nodes, stdlib only, Python 3.9+.

The CLI imports its definitions (``settings``) so it can never accept a value a node refuses.
"""
