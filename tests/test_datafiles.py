"""A dataset file that is not what its name says stops the run with one line naming the file."""

from __future__ import annotations

import os

import pytest

from prefray.engine.benchmark import DataError
from prefray.engine.datafiles import read_records


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.json", "rows.parquet"])
def test_a_garbage_dataset_file_is_refused_with_its_name(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"\xff\xfe\x00garbage" + os.urandom(4096))
    with pytest.raises(DataError) as raised:
        read_records(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert ("not UTF-8" in message) if name != "rows.parquet" else ("not a readable Parquet file" in message)
