"""Container images: reference grammar (``ref``), the registry client (``registry``), resolving a spec's
images to digests (``resolve``) and the image lock file, read positioned and written atomically
(``lock_file``).

May import: spec
"""
