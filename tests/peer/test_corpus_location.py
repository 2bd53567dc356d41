"""Where the peer-trace corpus is looked for, and what the skip says when it is not found (issue 30
item 6: 125 skips named one hard-coded folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.peer.corpus import ENV_VAR, find_peer, peer_candidates


def test_the_environment_variable_wins_and_the_skip_reason_names_every_place_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "clone" / "repo"
    repo.mkdir(parents=True)
    monkeypatch.delenv(ENV_VAR, raising=False)
    path, reason = find_peer(repo)
    assert path == tmp_path / "clone" / "shared" / "peer-traces"
    assert str(path) in reason and ENV_VAR in reason

    corpus = tmp_path / "elsewhere"
    corpus.mkdir()
    monkeypatch.setenv(ENV_VAR, str(corpus))
    assert find_peer(repo) == (corpus, "")


def test_a_git_worktree_finds_the_corpus_next_to_its_main_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "h1").mkdir(parents=True)
    corpus = tmp_path / "shared" / "peer-traces"
    corpus.mkdir(parents=True)
    tree = tmp_path / "wt" / "h1"
    tree.mkdir(parents=True)
    (tree / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'h1'}\n")
    assert peer_candidates(tree) == [tmp_path / "wt" / "shared" / "peer-traces", corpus]
    assert find_peer(tree) == (corpus, "")
