"""The shared image store on FSx: layout, manifest, published record, cluster records, importing, sync, verify,
status, gc, progress and the disk preflight. Who writes what, under which lock, and what readers may see meanwhile:
concurrency.py (the rules as code) and docs/store-concurrency.md (the same rules, one page).

May import: contract, image
"""
