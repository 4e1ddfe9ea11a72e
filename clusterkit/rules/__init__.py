"""What ParallelCluster, EC2, FSx and the nodes would refuse, found offline before a deploy: the checks
by concern (``cluster``, ``network``, ``storage``, ``queues``, ``login_nodes``, ``containers``, run in order by
``check``),
the limits they share with the JSON Schema (``limits``), AWS account limits (``aws_limits``), image
compatibility (``compat_rules``) and the sizing warnings (``advice``).

May import: spec, catalog, images, effective
"""
