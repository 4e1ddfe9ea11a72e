"""What spans nodes: each node's fingerprint, the drift between them, and the NCCL transport a job really used.

May import: contract, image, store, node
"""
