"""schema/tables.py: string columns as codes, the one way analysis and the timeline read
them (they had a copy each: int8 codes and sorted str categories in one, int64 codes and
the categories as they were in the other)."""
import numpy as np
import pandas as pd

from nbtools.schema import tables
from nbtools.schema.tables import string_codes


def test_categorical_and_plain_columns_code_alike():
    values = ["cuda:0:7", "cpu:1", "cuda:0:7", "cpu:2"]
    cat = tables.from_columns({"rank": [0] * 4, "lane": values, "category": ["compute"] * 4,
                               "name": ["k"] * 4, "ts_ns": [0] * 4, "dur_ns": [1] * 4,
                               "step": [0] * 4, "correlation": [-1] * 4, "graph": [False] * 4},
                              tables.EVENT_COLUMNS)["lane"]
    for column in (cat, pd.Series(values, dtype=object)):
        codes, names = string_codes(column)
        assert codes.dtype == np.int64 and list(names[codes]) == values
        assert all(isinstance(n, str) for n in names)


def test_missing_values_code_as_minus_one():
    codes, names = string_codes(pd.Series(["a", None, "b"], dtype=object))
    assert codes.tolist() == [0, -1, 1] and list(names) == ["a", "b"]
    codes, names = string_codes(pd.Series(pd.Categorical(["a", None])))
    assert codes.tolist() == [0, -1] and list(names) == ["a"]
