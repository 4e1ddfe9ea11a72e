"""ClusterKit: a cluster spec turned into a containerized GPU cluster on AWS ParallelCluster.

This package never imports aws_cdk: the CLI, the render check and the tests use it, and it must stay
fast. The CDK code lives in the top-level ``stacks`` package. This file imports nothing, so any module
(and the ParallelCluster venv, which puts the checkout on PYTHONPATH) can read the constant below.
"""

DEFAULT_PC_VERSION = "3.16.1"
"""The one ParallelCluster version: the spec default, the newest version the rules accept, the pin in
requirements-pcluster.txt and the package installed in .venv-pcluster (tests/pcluster/test_pc_version.py
checks the last two against it)."""
