"""Reading text: newlines kept, and a one-line error for each bad input."""

from __future__ import annotations

import pytest

from fullrank.data.text import read_lines, read_text, split_lines
from fullrank.errors import DataError


def one_line_error(fn, *args) -> str:
    with pytest.raises(DataError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_read_text_keeps_newlines_and_read_lines_splits(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"First Citizen:\r\nBefore we proceed,\n\n  any further  \nlast")
    assert read_text(path) == "First Citizen:\r\nBefore we proceed,\n\n  any further  \nlast"
    assert read_lines(path) == ["First Citizen:", "Before we proceed,", "", "  any further  ", "last"]
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("a\x0bb\u2028c\n") == ["a\x0bb\u2028c"]  # only \n ends a line


def test_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfhello\n")
    assert read_lines(path) == ["hello"]


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope" / "train.txt"
    for fn in (read_text, read_lines):
        message = one_line_error(fn, path)
        assert str(path) in message and "check the path" in message


def test_directory_is_not_a_file(tmp_path):
    assert "is a directory" in one_line_error(read_text, tmp_path)


def test_empty_and_whitespace_only_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert f"{empty}: the file is empty" in one_line_error(read_lines, empty)
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\n\t\n")
    assert "only whitespace" in one_line_error(read_text, blank)


def test_undecodable_bytes_give_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("line one\nline two\nZürich café\n".encode("latin-1"))
    message = one_line_error(read_lines, path)
    assert message.startswith(f"{path}:3: not valid UTF-8")
    assert "0xfc" in message and "column 2" in message
    assert message.endswith("re-encode the file as UTF-8")
