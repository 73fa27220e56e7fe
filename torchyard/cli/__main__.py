"""`python -m torchyard.cli`: the same as the `torchyard` console script."""

import sys

from torchyard.cli import main

sys.exit(main())
