"""Text generated from specs and committed: the ParallelCluster YAML (``pcluster_config``, from the effective
spec only), the spec's JSON Schema (``spec_schema``) and reference (``spec_reference``), and the writer that
keeps ``cluster_configs/rendered/`` and both documents current (``rendered_files``).

May import: spec, effective, rules, pipeline, artifacts
"""
