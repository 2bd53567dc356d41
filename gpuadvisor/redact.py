"""Mask credentials before text is written anywhere (manifest.json, environment.json, callsites.json,
findings.json, report.html, logs): the one module that decides what a credential looks like.

`redact_argv(argv)` masks a command line, `redact_text(text)` a line of source code or any other
text. A value is masked (`***`) when:
- its option, variable, key or header name says it is a secret: a word (split at `-`, `_`, `.`, `:`
  and camelCase) that is one of SECRET_WORDS or ends with one of SECRET_SUFFIXES (`--api-key`,
  `--apitoken`, `--accesstoken`, `--clientsecret`, `--passw`, `--pass`, `HF_TOKEN=`, `"password": "x"`,
  `token = "..."`, `?api_key=...`, `X-Api-Key: ...`; not `--tokenizer`, `--max-tokens`, `--passes`,
  `--bypass`), whether it follows the name as the next argument (`--password VALUE`, also a value that
  starts with `-`), after `=` or `:` (`--password=X`, `--hf-token:X`) or inside a string (JSON,
  query strings, assignments);
- it follows the short options `-p` or `-P` (`-p X`, `-p=X`, glued `-pX`: mysql's and many tools'
  password flag; a script that uses `-p` for a port gets it masked too, which `gpuadvisor verify`
  then asks for);
- it looks like a well-known token whatever its name (TOKEN below: OpenAI `sk-`, GitHub `ghp_` `gho_`
  `ghu_` `ghs_` `ghr_` `github_pat_`, GitLab `glpat-`, Slack `xox?-` and webhook URLs, AWS `AKIA`,
  Hugging Face `hf_`, Google `AIza`, Stripe `sk_live_`/`rk_live_`, npm `npm_`, a `Bearer`, `token` or
  `Basic` authorization, a private key block);
- it is the password of a URL (`https://user:pass@host`, `redis://:pass@host`, a password holding `@`
  or `/`: only the password is masked).
`gpuadvisor profile --no-redact` keeps everything. The real command exists only in the running
processes; the manifest records which arguments were masked (`argv_redacted`), so `gpuadvisor verify`
can say it cannot re-run them.
"""

from __future__ import annotations

import json
import re
from collections.abc import MutableMapping, Sequence

__all__ = [
    "MASK",
    "REAL_ARGV_ENV",
    "SECRET_SUFFIXES",
    "SECRET_WORDS",
    "redact_argv",
    "redact_lines",
    "redact_text",
    "sealed_argv",
    "unsealed_argv",
]

MASK = "***"

# a name holds a secret when one of its words is one of these (--api-key, --hf_token, PASSWORD=, --pass,
# DB_PASSCODE) or ends with one of SECRET_SUFFIXES (--apitoken, --clientsecret, dbpassword); not
# --tokenizer, --max-tokens, --keyframes, --passes, --bypass
SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "passw", "pwd", "pw", "pass", "passphrase",
     "passcode", "credential", "credentials", "auth", "authorization", "pat"}
)  # fmt: skip
SECRET_SUFFIXES = (
    "token", "secret", "password", "passwd", "apikey", "accesskey", "secretkey", "privatekey", "credential",
    "credentials", "passphrase", "passcode",
)  # fmt: skip
# short options whose value is a secret: `-p X` (mysql -p, sshpass -p, many scripts), `-P X`
SECRET_SHORT_OPTIONS = frozenset({"-p", "-P"})

_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# in source code and other text these words alone are too common to mean a secret (`key = ...`,
# `for key in d`): there a name needs another secret word or suffix (`api_key`, `auth_token`)
_TEXT_ONLY_WITH_MORE = frozenset({"key", "pat", "pw", "pass", "auth"})


def _is_secret_word(word: str) -> bool:
    w = word.lower()
    return w in SECRET_WORDS or w.endswith(SECRET_SUFFIXES)


def _secret_name(name: str, *, text: bool = False) -> bool:
    if name in SECRET_SHORT_OPTIONS:
        return not text
    joined = re.sub(r"[^a-z0-9]", "", name.lower())
    if joined.endswith(SECRET_SUFFIXES):
        return True
    for part in re.split(r"[-_.:\s]+", name.strip("-\"' ")):
        words = [part, *_WORD.findall(part)] if part else []
        for w in (x.lower() for x in words):
            if w.endswith(SECRET_SUFFIXES) or (
                w in SECRET_WORDS and not (text and w in _TEXT_ONLY_WITH_MORE)
            ):
                return True
    return False


_OPTION = re.compile(r"^(--?[A-Za-z0-9][A-Za-z0-9_.-]*)([=:])(.*)$", re.S)
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)(=)(.*)$", re.S)
_OPTION_NAME = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*$")
_GLUED = re.compile(r"^(-[pP])([^-=].*)$", re.S)  # -pSECRET
_TOKEN = re.compile(
    r"(?:\bsk-[A-Za-z0-9_-]{12,}|\bgh[opsur]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bglpat-[A-Za-z0-9_-]{16,}|\bxox[a-z]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b|\bhf_[A-Za-z0-9]{20,}"
    r"|\bAIza[0-9A-Za-z_-]{30,}|\b[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|\bnpm_[A-Za-z0-9]{30,}"
    r"|hooks\.slack\.com/services/[A-Za-z0-9/_-]+"
    r"|\b(?:Bearer|Basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$))"
)
# scheme://user:PASSWORD@host: the password runs to the last `@` of the word (it may hold `@` or `/`)
_URL_PASSWORD = re.compile(
    r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<pw>[^\s]*?)(?P<at>@)(?=[^@\s]*(?:\s|$))"
)
# `name = rest of the line` (an assignment in code, with or without a type annotation): the whole
# right-hand side is masked when `name` is a secret's (`hf_token = os.environ.get("X", "hf_...")`)
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.]*)(?P<sep>\s*(?::[^=\n]*)?(?<![=!<>])=(?!=)\s*)(?P<rest>[^\n]+)"
)
# `?name=value&`: a query string's parameters
_QUERY = re.compile(r"(?P<name>(?<=[?&;])[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>=)(?P<rest>[^&#\s]+)")
# NAME: VALUE, "NAME": "VALUE", NAME=VALUE inside a string (JSON, headers, key=value lists)
_NAMED = re.compile(
    r"""(?P<name>["']?[A-Za-z_][A-Za-z0-9_.-]*["']?)(?P<sep>\s*(?<![=!<>])[:=](?![=/])\s*)"""
    r"""(?:(?P<q>["'])(?P<quoted>[^"'\n]*)(?P=q)|(?P<bare>[^\s"',;&}\])(=?]+))"""
)


def _masked_rest(m: re.Match[str]) -> str:
    if not _secret_name(m.group("name"), text=True) or m.group("rest").strip() in (
        "None",
        "null",
        '""',
        "''",
    ):
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{MASK}"


def _mask_named(m: re.Match[str]) -> str:
    name = m.group("name")
    value = m.group("quoted") if m.group("q") else m.group("bare")
    if not value or value == MASK or not _secret_name(name, text=True):
        return m.group(0)
    q = m.group("q") or ""
    return f"{name}{m.group('sep')}{q}{MASK}{q}"


def redact_text(text: str) -> tuple[str, bool]:
    """`text` (a source line, a value, a message) with every credential of the module docstring
    masked, and whether anything was."""
    out = _TOKEN.sub(MASK, text)
    out = _URL_PASSWORD.sub(lambda m: m.group("pre") + MASK + m.group("at"), out)
    out = _QUERY.sub(_masked_rest, out)
    out = _NAMED.sub(_mask_named, out)
    out = _ASSIGNMENT.sub(_masked_rest, out)
    return out, out != text


def redact_lines(lines: Sequence[str]) -> list[str]:
    """Each line through `redact_text` (a recorded source snippet)."""
    return [redact_text(line)[0] for line in lines]


def redact_argv(argv: Sequence[str]) -> tuple[list[str], tuple[int, ...]]:
    """`argv` with credentials masked, and the indices of the arguments that changed."""
    out = [str(a) for a in argv]
    changed: list[int] = []
    mask_next = False
    for i, arg in enumerate(out):
        new = arg
        if mask_next and not arg.startswith("--"):
            new = MASK  # the value of `--password VALUE`, also one that starts with a single `-`
        mask_next = False
        if new == arg:
            m = _OPTION.match(arg) or _ASSIGN.match(arg)
            # `-pSECRET`, unless the whole is a secret option's own name (`-pass`, `-pwd`, `-pat`)
            glued = _GLUED.match(arg) if not _is_secret_word(arg[1:]) else None
            if m and _secret_name(m.group(1)) and m.group(3):
                new = m.group(1) + m.group(2) + MASK
            elif m:
                value, _ = redact_text(m.group(3))
                new = m.group(1) + m.group(2) + value
            elif glued:
                new = glued.group(1) + MASK
            elif _OPTION_NAME.match(arg) and _secret_name(arg):
                mask_next = True  # `--api-key VALUE`: the next argument is the secret
            else:
                new, _ = redact_text(arg)
        if new != arg:
            out[i] = new
            changed.append(i)
    return out, tuple(changed)


# A command line that holds a credential is never written to disk on its way to a child process (the
# capture's .child_config.json, verify's trial configs): the file gets it masked, and the real one
# travels in this environment variable, which the child reads and removes before the script runs.
REAL_ARGV_ENV = "GPUADVISOR_REAL_ARGV"


def sealed_argv(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(the argv to write into a child's config file, the environment entries that carry the real one
    to the child): the masked argv and {REAL_ARGV_ENV: the real argv as JSON} when it holds a
    credential; else the argv as it is and {}."""
    masked, changed = redact_argv(argv)
    if not changed:
        return list(argv), {}
    return masked, {REAL_ARGV_ENV: json.dumps(list(argv))}


def unsealed_argv(argv: Sequence[str], environ: MutableMapping[str, str]) -> list[str]:
    """In the child: the real argv (`sealed_argv`), taken out of `environ` so that the script and its
    own children never see it; `argv` (from the config file) when there is none."""
    real = environ.pop(REAL_ARGV_ENV, None)
    if real is not None:
        try:
            value = json.loads(real)
        except ValueError:
            value = None
        if isinstance(value, list) and len(value) == len(argv) and all(isinstance(a, str) for a in value):
            return value
    return list(argv)
