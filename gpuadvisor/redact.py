"""Mask credentials in a command line before it is written anywhere (manifest.json, report.html,
findings.json, logs).

A value is masked when its option or variable name says it is a secret (`--api-key sk-...`,
`--password=...`, `--pass X`, `--passphrase X`, `HF_TOKEN=...`; one of the words of `_SECRET_WORDS`),
when it follows the short option `-p` (`-p X`, `-p=X`: mysql's and many tools' password flag; a
script that uses `-p` for a port gets it masked too, which `gpuadvisor verify` then asks for), or when it looks like a well-known token whatever its name (`sk-`,
`ghp_`, `github_pat_`, `xox[bap]-`, `AKIA`, `hf_`, a `Bearer` token), or it is a URL with a password
(`https://user:pass@host`: only the password is masked). `gpuadvisor profile --no-redact` keeps
everything. The real command exists only in the running processes; the manifest records which
arguments were masked (`argv_redacted`), so `gpuadvisor verify` can say it cannot re-run them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MASK = "***"

# a name holds a secret when one of its words (split at - _ .) is one of these: --api-key, --hf_token,
# --client-secret, PASSWORD=, --apiKey, --pass, --passphrase, DB_PASSCODE; not --tokenizer, --max-tokens,
# --keyframes, --passes, --bypass
SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "pw", "pass", "passphrase", "passcode",
     "credential", "credentials", "auth", "pat"}
)  # fmt: skip
# short options whose value is a secret: `-p X` (mysql -p, sshpass -p, many scripts)
SECRET_SHORT_OPTIONS = frozenset({"-p"})


def _secret_name(name: str) -> bool:
    if name in SECRET_SHORT_OPTIONS:
        return True
    return any(w.lower() in SECRET_WORDS for w in re.split(r"[-_.]+", name.lstrip("-")) if w)


_OPTION = re.compile(r"^(--?[A-Za-z0-9][A-Za-z0-9_.-]*)(=)(.*)$", re.S)
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)(=)(.*)$", re.S)
_TOKEN = re.compile(
    r"(?:\bsk-[A-Za-z0-9_-]{12,}|\bghp_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bxox[bap]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b|\bhf_[A-Za-z0-9]{20,}|\bBearer\s+[A-Za-z0-9._~+/=-]{8,})"
)
_URL_PASSWORD = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:)(?P<pw>[^@/\s]+)(?P<at>@)")


def _mask_value(value: str) -> tuple[str, bool]:
    """A value that is a token or holds a URL password, masked."""
    if _TOKEN.search(value):
        return MASK, True
    masked, n = _URL_PASSWORD.subn(lambda m: m.group("pre") + MASK + m.group("at"), value)
    return masked, n > 0


def redact_argv(argv: Sequence[str]) -> tuple[list[str], tuple[int, ...]]:
    """`argv` with credentials masked, and the indices of the arguments that changed."""
    out = [str(a) for a in argv]
    changed: list[int] = []
    mask_next = False
    for i, arg in enumerate(out):
        new = arg
        if mask_next and not arg.startswith("-"):
            new = MASK
        mask_next = False
        if new == arg:
            m = _OPTION.match(arg) or _ASSIGN.match(arg)
            if m and _secret_name(m.group(1)) and m.group(3):
                new = m.group(1) + "=" + MASK
            elif m:
                value, hit = _mask_value(m.group(3))
                new = m.group(1) + "=" + value if hit else arg
            elif arg.startswith("-") and _secret_name(arg):
                mask_next = True  # `--api-key VALUE`: the next argument is the secret
            else:
                new, _ = _mask_value(arg)
        if new != arg:
            out[i] = new
            changed.append(i)
    return out, tuple(changed)
