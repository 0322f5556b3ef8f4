"""Local dataset files: the rows of a ``.jsonl``, ``.json``, ``.csv`` or ``.parquet`` file.

The chat environments' local datasets (rl-envs) and the tokenized text datasets (rl-data)
read their files with :func:`read_rows`; each passes the suffixes it accepts.

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from rl.core.datafiles import read_rows
    >>> path = Path(tempfile.mkdtemp()) / "train.jsonl"
    >>> _ = path.write_text('{"question": "1+1", "answer": 2}\\n\\n{"question": "2+2", "answer": 4}\\n')
    >>> read_rows(path)
    [{'question': '1+1', 'answer': 2}, {'question': '2+2', 'answer': 4}]
"""

from __future__ import annotations

import csv
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SUFFIXES", "read_rows"]

#: the file suffixes :func:`read_rows` reads
SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def read_rows(path: str | Path, suffixes: Sequence[str] = SUFFIXES) -> list[dict]:
    """The rows of a dataset file, one dict per row.

    A ``.jsonl`` file holds one JSON object a line (blank lines skipped); a ``.json``
    file a list of objects or a ``{field: [values]}`` mapping of columns; a ``.csv``
    file a header row (its values are read as strings); a ``.parquet`` file needs
    pyarrow.

    Args:
        path: the file; its suffix (any case) picks the format.
        suffixes: the suffixes the caller accepts, among :data:`SUFFIXES`.

    Returns:
        The rows, in file order.

    Raises:
        ValueError: the suffix is not one of ``suffixes``.
        ImportError: a ``.parquet`` file without pyarrow installed.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in suffixes or suffix not in SUFFIXES:
        raise ValueError(
            f"dataset file {path} has suffix {suffix!r}, expected one of {tuple(suffixes)}"
        )
    if suffix == ".jsonl":
        with path.open() as f:
            return [json.loads(line) for line in f if line.strip()]
    if suffix == ".json":
        with path.open() as f:
            data = json.load(f)
        if isinstance(data, dict):  # {"field": [values]} columns
            return [dict(zip(data, values)) for values in zip(*data.values())]
        return list(data)
    if suffix == ".csv":
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    if importlib.util.find_spec("pyarrow") is None:
        raise ImportError(f"reading {path} needs pyarrow (pip install pyarrow)")
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
