"""What the CLI side and every node agree on: the node settings table, the image lock model, the store's names and
paths, the compatibility rules evaluator, sizing, the AMI profiles, the bundle's file names, enroot's URI grammar
and enroot.conf's syntax, and the console conventions (one-line errors, exit codes, log lines)
every node command shares.

The CLI imports these so it can never accept a value a node refuses; they import nothing else of the node side.

May import: (nothing else in clusterkit_node)
"""
