"""`python -m gemmforge.cli ...`: the gemmforge command."""
import sys

from . import main

sys.exit(main())
