"""``python -m clusterkit``: see cli.py."""
import sys

from clusterkit.cli.main import main

sys.exit(main())
