"""`python -m relpkg.main ARGS`: a relative import, __name__, __package__, __file__ and sys.argv."""

import os
import sys

from .helper import answer

print("__name__", __name__, "__package__", __package__)
print("__file__", os.path.relpath(__file__))
print("argv0", os.path.relpath(sys.argv[0]), "args", sys.argv[1:])
print("answer", answer())
if __name__ == "__main__":
    sys.exit(5)
