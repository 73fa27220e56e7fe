"""`python -m app.cli`: the same as the `torchyard` console script."""

import sys

from app.cli import main

sys.exit(main())
