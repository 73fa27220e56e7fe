"""One type per exported column whatever the mix of origins (torchyard/cli/export_types.py):
a job's params are numbers, an MLflow client's the strings it sent."""

from __future__ import annotations

from torchyard.cli.export_types import Kind, infer, typed


def test_numbers_and_strings_that_spell_them_stay_numbers() -> None:
    assert infer("params.batch_size", [32, "64", None, ""]) is Kind.INT
    assert infer("params.lr", [0.1, "0.01", "1e-3", 3]) is Kind.FLOAT
    assert infer("params.amp", [True, "false", None]) is Kind.BOOL


def test_anything_else_makes_the_column_text() -> None:
    assert infer("params.note", [3, "three"]) is Kind.TEXT
    assert infer("params.flag", [True, 1]) is Kind.TEXT  # a bool is not the number 1
    assert infer("params.odd", ["nan", 1.0]) is Kind.TEXT  # only decimal spellings count
    assert infer("params.none", [None, ""]) is Kind.TEXT


def test_fixed_and_metric_columns_keep_their_types() -> None:
    assert infer("id", ["1"]) is Kind.INT
    assert infer("name", ["42"]) is Kind.TEXT
    assert infer("metrics.val/acc", [None]) is Kind.FLOAT


def test_rows_are_converted_to_their_columns_type() -> None:
    columns = ["id", "params.lr", "params.note", "params.args", "metrics.loss"]
    rows = [
        {"id": 1, "params.lr": "0.01", "params.note": 3, "params.args": [1, 2]},
        {"id": 2, "params.lr": 0.1, "params.note": "three", "metrics.loss": 0.5},
    ]
    kinds, out = typed(columns, rows)
    assert kinds["params.lr"] is Kind.FLOAT and kinds["params.note"] is Kind.TEXT
    assert out == [
        {"id": 1, "params.lr": 0.01, "params.note": "3", "params.args": "[1, 2]",
         "metrics.loss": None},
        {"id": 2, "params.lr": 0.1, "params.note": "three", "params.args": None,
         "metrics.loss": 0.5},
    ]  # fmt: skip
