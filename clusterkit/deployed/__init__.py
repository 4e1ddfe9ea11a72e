"""Clusters that exist in AWS: ``status_report`` (stacks, TTL, head node, through boto3) and ``export`` (a
concrete ParallelCluster YAML from the deployed stacks' outputs).

May import: spec, effective, pipeline, render, artifacts
"""
