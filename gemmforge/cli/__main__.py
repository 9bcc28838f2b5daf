"""`python -m gemmforge.cli ...`: the gemmforge command."""
import sys

from gemmforge.cli import main

sys.exit(main())
