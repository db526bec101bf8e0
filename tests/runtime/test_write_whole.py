"""runtime.follow.write_whole: a file written out a piece at a time (``verlctl logs -n 0`` of every run)."""

from __future__ import annotations

from verlctl.runtime.follow import write_whole


def test_every_byte_in_pieces_no_larger_than_the_chunk_a_split_character_whole() -> None:
    data = ("ab\u00e9cd\u4e2d" * 5).encode()
    asked: list[tuple[int, int]] = []

    def read(offset: int, n: int) -> bytes:
        asked.append((offset, n))
        return data[offset:offset + n]

    out: list[str] = []
    assert write_whole(read, len(data), out.append, chunk=4) == len(data)
    assert "".join(out) == data.decode()
    assert all(n <= 4 for _, n in asked) and asked[0] == (0, 4) and asked[-1][0] + asked[-1][1] == len(data)


def test_a_file_that_shrank_or_cannot_be_read_stops_the_copy() -> None:
    out: list[str] = []
    assert write_whole(lambda o, n: b"abc"[o:o + n], 10, out.append, chunk=2) == 3  # shrank to 3 bytes
    assert "".join(out) == "abc"
    out.clear()
    assert write_whole(lambda o, n: None, 10, out.append) == 0 and "".join(out) == ""
    assert write_whole(lambda o, n: b"zz", 0, out.append) == 0  # size 0: nothing asked


def test_a_file_that_ends_inside_a_character_ends_with_a_replacement_character() -> None:
    data = "ok \u00e9".encode()[:-1]  # the last character cut after its first byte (a log written to a full disk)
    out: list[str] = []
    assert write_whole(lambda o, n: data[o:o + n], len(data), out.append) == len(data)
    assert "".join(out) == "ok \ufffd"
