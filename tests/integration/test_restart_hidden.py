"""``--restart`` moves a run's own contents to ``previous/N/``, never the hidden files (a
``.git``) of the folder the run was started in: such a folder counts as empty (K30)."""

from __future__ import annotations

from kestrel import RunDir


def test_k30_restart_leaves_the_folders_hidden_files_in_place(tmp_path):
    root = tmp_path / "run"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".gitkeep").write_text("")
    (root / "run.json").write_text("{}")
    (root / "config.yml").write_text("graph: {}\n")
    (root / ".tmp-abc").write_text("an unfinished write")  # Kestrel's own: moves
    target = RunDir(root).archive()
    assert sorted(p.name for p in root.iterdir()) == [".git", ".gitkeep", "previous"]
    assert (root / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert sorted(p.name for p in (tmp_path / "run" / "previous" / "1").iterdir()) == [
        ".tmp-abc",
        "config.yml",
        "run.json",
    ]
    assert target.endswith("previous/1")
