"""Offline facts about EC2 instance types and regions (``lookup``), and the command that distills them from
AWS answers into ``clusterkit/data`` (``build``).

May import: (nothing else in clusterkit)
"""
