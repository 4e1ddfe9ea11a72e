"""ClusterKit: a cluster spec turned into a containerized GPU cluster on AWS ParallelCluster.

This package never imports aws_cdk: the CLI, the render check and the tests use it, and it must stay
fast. The CDK code lives in the top-level ``stacks`` package.
"""

DEFAULT_PC_VERSION = "3.16.1"
