"""SYNTHETIC fixture package: `python -m relpkg.main` with a relative import."""

ANSWER = 42
