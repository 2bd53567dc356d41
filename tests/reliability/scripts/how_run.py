"""SYNTHETIC fixture: prints how it was run, for the "behaves exactly as under python" case."""

import os
import sys

print("__name__", __name__)
print("__file__", __file__)
print("argv", sys.argv)
print("path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
print("spec", __spec__ is None if __name__ == "__main__" else __spec__.name)

if __name__ == "__main__":
    print("main block ran")
    sys.exit(4)
