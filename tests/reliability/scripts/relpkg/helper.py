from . import ANSWER


def answer() -> int:
    return ANSWER
