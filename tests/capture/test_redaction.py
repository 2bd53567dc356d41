"""Credentials on the command line never reach the run directory (issue 12): masked in manifest.json
(command and target.argv), hence in the report; the indices are recorded; `--no-redact` keeps them;
the child's config file (the real command line) is gone once the child has read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_helpers import FAST, SCRIPTS, manifest, run_profile_cli

from gpuadvisor.manifest import Manifest
from gpuadvisor.redact import MASK, SECRET_SHORT_OPTIONS, SECRET_WORDS, redact_argv

SECRETS = ["sk-abcdefghijklmnop1234", "hunter2", "ghp_aaaaaaaaaaaaaaaaaaaaaaaa", "s3cr3t", "pw123"]


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--api-key", "sk-abcdefghijklmnop1234"], ["--api-key", MASK]),
        (["--password=hunter2"], ["--password=" + MASK]),
        (["HF_TOKEN=abc"], ["HF_TOKEN=" + MASK]),
        (["--apiKey", "zzz"], ["--apiKey", MASK]),
        (["--x", "ghp_aaaaaaaaaaaaaaaaaaaaaaaa"], ["--x", MASK]),
        (["--url", "https://me:pw123@host/x"], ["--url", f"https://me:{MASK}@host/x"]),
        (["--header", "Bearer abcdefghijkl"], ["--header", MASK]),
        # not secrets: a tokenizer name, a token count, an ordinary flag
        (["--tokenizer", "gpt2", "--max-tokens", "512", "--lr", "0.1"], None),
        (["--api-key", "--next-flag"], None),  # a flag after the name is not its value
    ],
)
def test_redact_argv(argv: list[str], want: list[str] | None) -> None:
    out, changed = redact_argv(argv)
    assert out == (want if want is not None else argv)
    assert changed == tuple(i for i, (a, b) in enumerate(zip(argv, out, strict=True)) if a != b)


# Every form a secret's name takes on a command line (issue 29: --pass, --passphrase and -p leaked).
_NAME_FORMS = ("--{w} VALUE", "--{w}=VALUE", "{W}=VALUE", "--db-{w} VALUE", "--{w}_file=VALUE", "-{w} VALUE")


@pytest.mark.parametrize("word", sorted(SECRET_WORDS))
@pytest.mark.parametrize("form", _NAME_FORMS)
def test_every_secret_word_in_every_form_is_masked(word: str, form: str) -> None:
    argv = form.format(w=word, W=word.upper()).split(" ")
    out, changed = redact_argv(["--lr", "0.1", *argv])
    assert "VALUE" not in " ".join(out) and changed == (2 + len(argv) - 1,), out


@pytest.mark.parametrize("option", sorted(SECRET_SHORT_OPTIONS))
@pytest.mark.parametrize("form", ["{o} VALUE", "{o}=VALUE"])
def test_secret_short_options_are_masked(option: str, form: str) -> None:
    out, _ = redact_argv(form.format(o=option).split(" "))
    assert "VALUE" not in " ".join(out), out


@pytest.mark.parametrize(
    "argv", [["--passes", "3"], ["--bypass", "1"], ["--compass", "n"], ["--pin-memory", "1"],
             ["--keyframes", "4"], ["--max-tokens", "512"], ["-q", "x"]],
)  # fmt: skip
def test_names_that_only_contain_a_secret_word_are_kept(argv: list[str]) -> None:
    assert redact_argv(argv) == (argv, ())


def _args() -> list[str]:
    return ["--api-key", SECRETS[0], "--password=" + SECRETS[1], "--x", SECRETS[2], "TOKEN=" + SECRETS[3],
            "--url", f"https://me:{SECRETS[4]}@host/x"]


@pytest.mark.slow  # a real `gpuadvisor profile` run (seconds): not the quick tier
def test_profile_masks_credentials_in_every_file(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), *FAST, str(SCRIPTS / "train_cpu.py"), "--steps", "12", *_args())
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert Manifest.from_json(m).argv_redacted == (4, 5, 7, 8, 10) and m["argv_redacted"] == [4, 5, 7, 8, 10]
    assert not (out / ".child_config.json").exists()
    everything = "".join(
        p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".log", ".md", ".html")
    ) + r.stdout + r.stderr
    for secret in SECRETS:
        assert secret not in everything, secret


@pytest.mark.slow  # a real `gpuadvisor profile` run (~8 s on 2 loaded cores): not the quick tier
def test_no_redact_keeps_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(out), *FAST, "--no-redact", str(SCRIPTS / "train_cpu.py"), "--steps", "12", *_args()
    )
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert "argv_redacted" not in m and SECRETS[0] in m["target"]["argv"]
    assert json.dumps(m).count(SECRETS[1]) == 2  # command and target.argv


def test_verify_refuses_a_masked_command_unless_given_the_real_one(tmp_path: Path) -> None:
    from gpuadvisor.errors import UsageError
    from gpuadvisor.verify.command import recorded_command

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    rec = {
        "cwd": str(tmp_path),
        "target": {"kind": "script", "path_or_name": str(script), "argv": [str(script), "--api-key", MASK]},
        "argv_redacted": [2],
    }
    with pytest.raises(UsageError, match="masked"):
        recorded_command(rec)
    cmd = recorded_command(rec, [str(script), "--api-key", "real-value"])  # profile --verify passes it
    assert cmd.args == ("--api-key", "real-value")
