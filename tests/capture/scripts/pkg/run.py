"""Fixture: run with -m pkg.run; uses a relative import."""

import sys

from .helper import VALUE

if __name__ == "__main__":
    print("module", __name__, __package__, VALUE, sys.argv[1:])
    sys.exit(5)
