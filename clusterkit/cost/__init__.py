"""What a cluster costs: the estimate from list prices (``estimate``), the Price List API reader
(``price_list``) and the command that rebuilds ``clusterkit/data/prices.json`` (``price_build``).

May import: spec, catalog, effective, rules, pipeline
"""
