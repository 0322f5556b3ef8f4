import doctest
import importlib.util
import json

import pytest

import rl.core.datafiles
from rl.core.datafiles import SUFFIXES, read_rows


def test_doctests():
    result = doctest.testmod(rl.core.datafiles, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


class TestReadRows:
    def test_jsonl_skips_blank_lines(self, tmp_path):
        path = tmp_path / "d.JSONL"  # the suffix in any case
        path.write_text('{"a": 1, "b": "x"}\n\n  \n{"a": 2, "b": "y"}\n')
        assert read_rows(path) == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]

    def test_json_rows_and_columns(self, tmp_path):
        rows = tmp_path / "rows.json"
        rows.write_text(json.dumps([{"a": 1}, {"a": 2}]))
        assert read_rows(str(rows)) == [{"a": 1}, {"a": 2}]
        columns = tmp_path / "columns.json"
        columns.write_text(json.dumps({"q": ["1+1", "2+2"], "a": [2, 4]}))
        assert read_rows(columns) == [{"q": "1+1", "a": 2}, {"q": "2+2", "a": 4}]

    def test_csv_values_are_strings(self, tmp_path):
        path = tmp_path / "d.csv"
        path.write_text("q,a\n1+1,2\n2+2,4\n")
        assert read_rows(path) == [{"q": "1+1", "a": "2"}, {"q": "2+2", "a": "4"}]

    def test_suffix_not_accepted(self, tmp_path):
        with pytest.raises(ValueError, match=r"has suffix '\.txt', expected one of \('\.jsonl'"):
            read_rows(tmp_path / "d.txt")
        # a caller's narrower list: parquet refused, the message lists what it accepts
        with pytest.raises(
            ValueError, match=r"'\.parquet', expected one of \('\.jsonl', '\.json', '\.csv'\)$"
        ):
            read_rows(tmp_path / "d.parquet", SUFFIXES[:3])

    def test_parquet_without_pyarrow(self, tmp_path, monkeypatch):
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name)
        )
        with pytest.raises(ImportError, match=r"d\.parquet needs pyarrow \(pip install pyarrow\)"):
            read_rows(tmp_path / "d.parquet")
