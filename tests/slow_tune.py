"""`gemmforge` whose replay runner takes DELAY_S per program, so a tune can be stopped in
the middle of a batch (tests/test_faults.py sends it signals):

    python tests/slow_tune.py DELAY_S tune --shapes ... --replay synthetic ...
"""
import sys
import time

from gemmforge.search.measure import replay

DELAY_S = float(sys.argv[1])
_evaluate = replay.ReplayRunner.evaluate


def _slow(self, programs, problem):
    time.sleep(DELAY_S * len(programs))
    return _evaluate(self, programs, problem)


replay.ReplayRunner.evaluate = _slow

if __name__ == "__main__":
    from gemmforge.cli import main
    sys.exit(main(sys.argv[2:]))
