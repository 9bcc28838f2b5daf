"""`python -m gemmforge ...`: the gemmforge command."""
import sys

from .cli import main

sys.exit(main())
