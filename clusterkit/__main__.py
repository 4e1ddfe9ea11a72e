"""``python -m clusterkit``: see clusterkit/cli/main.py."""
import sys

from clusterkit.cli.main import main

sys.exit(main())
