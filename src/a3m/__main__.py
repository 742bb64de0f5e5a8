"""``python -m a3m`` runs the command line."""

import sys

from a3m.cli.main import main

sys.exit(main())
