"""The stages wired together: ``loader`` reads a spec file, runs the rules and the advice, checks the lock
and gives a ``Loaded``; ``deploy_context`` lays a deploy's ``-c`` values over the effective spec.

May import: spec, images, effective, rules
"""
