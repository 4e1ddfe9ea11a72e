"""The shared image store on FSx: manifest, published record, cluster records, importing, sync, verify, status, gc,
progress and the disk preflight. Every rule about who writes what, under which lock, lives here.

May import: contract, image
"""
