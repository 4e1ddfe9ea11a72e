"""What a cluster costs: the estimate from list prices (``estimate``), a platform's and a cluster's share of it
(``platform_cost``), the Price List API reader (``price_list``) and the command that rebuilds
``clusterkit/data/prices.json`` (``price_build``).

May import: spec, catalog, images, effective, rules, pipeline
"""
