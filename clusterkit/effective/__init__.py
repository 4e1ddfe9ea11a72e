"""The effective spec: every default and derived value of a spec resolved in one place (``expand``), the
node settings among them (``node_settings``). Render, the stacks and the node artifacts read this, never the
rules.

May import: spec, catalog, images
"""
