"""Fixture: prints how it was run (the pyinstrument parity test)."""

import os
import sys

print("__name__", __name__)
print("argv", sys.argv)
print("file", __file__)
print("cwd", os.getcwd())
print("executable", sys.executable)
print("path0", sys.path[0])
print("main_is_mp_main", sys.modules["__main__"] is sys.modules.get("__mp_main__", sys.modules["__main__"]))

if __name__ == "__main__":
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0)
