"""What a deploy ships besides the templates: the bootstrap bundle and node scripts (``bundle``), the
files the stacks receive (``stack_inputs``), and cdk-nag's report of a synth read back (``nag_report``).

May import: images, effective, pipeline
"""
