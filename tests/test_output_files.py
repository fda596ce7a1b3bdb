"""Issue 42, defect 4: an output file (``ask --html``, ``trace --html``, ``compare --plot``) is
written only to a regular file or a new path. The check took any zero-size path for an empty
file: a FIFO or a device node (as root, ``--html /dev/null``) was replaced by a regular file,
without ``--force``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from noterag.base.errors import ConfigError
from noterag.base.files import check_output_file
from scripted import cli


def _check(path: Path, force: bool = False) -> Path:
    return check_output_file(
        path, option="--html", ours=lambda p: False, what="a page", force=force
    )


def test_a_fifo_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for force in (False, True):
        with pytest.raises(ConfigError, match="is not a regular file"):
            _check(fifo, force)
    # the command line: one error line, non-zero exit, the FIFO still a FIFO
    result = cli("ask", "Who founded Velmora?", "--html", str(fifo), "--force")
    assert result.exit_code != 0 and "is not a regular file" in result.output
    assert fifo.is_fifo()


def test_regular_files_links_and_new_paths_still_take_an_output(tmp_path: Path) -> None:
    empty = tmp_path / "empty.html"
    empty.write_text("")
    assert _check(empty) == empty
    assert _check(tmp_path / "new.html") == tmp_path / "new.html"
    # a link is replaced itself by the atomic write, never what it points at
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "elsewhere.html")
    assert _check(link) == link
    mine = tmp_path / "mine.html"
    mine.write_text("a user's page")
    with pytest.raises(ConfigError, match="--force to overwrite"):
        _check(mine)
    assert _check(mine, force=True) == mine


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="no /dev/null device here")
def test_a_device_node_is_never_replaced() -> None:
    with pytest.raises(ConfigError, match="is not a regular file"):
        _check(Path("/dev/null"), force=True)
