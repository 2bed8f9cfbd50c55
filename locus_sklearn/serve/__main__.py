"""``python -m locus_sklearn.serve``: the deploying commands on their own."""

import sys

from ._cli import main

sys.exit(main())
