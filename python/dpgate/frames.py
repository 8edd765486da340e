"""Results as data frames: pandas (the default), polars or pyarrow.

Tables are built in Arrow with explicit column types, then handed over, so
the three outputs have the same columns and types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Union

import pandas as pd
import pyarrow as pa

from .records import Release

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Frame", "Output", "aggregate_frame", "arrow_stream", "ledger_frame", "to_output"]

Output = Literal["pandas", "polars", "arrow"]
"""Which kind of table a call returns."""

Frame = Union[pd.DataFrame, "pl.DataFrame", pa.Table]
"""A table of the kind asked for by ``output``."""

#: The columns of an aggregate frame after its dimensions.
AGGREGATE_COLUMNS = pa.schema(
    [
        ("statistic", pa.string()),
        ("value", pa.float64()),
        ("std", pa.float64()),
        ("exact", pa.bool_()),
    ]
)


def to_output(table: pa.Table, output: Output) -> Frame:
    """``table`` as ``output`` asks (polars is imported only then: it is an
    optional dependency)."""
    if output == "arrow":
        return table
    if output == "pandas":
        return table.to_pandas()
    if output == "polars":
        import polars as pl

        return pl.from_arrow(table)
    raise ValueError(f"output must be 'pandas', 'polars' or 'arrow', not {output!r}")


def arrow_stream(data: bytes) -> pa.Table:
    """The table of an Arrow IPC stream, reading the bytes in place (no
    copy)."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def aggregate_frame(
    release: Release, group_by: Sequence[str] | None = None, output: Output = "pandas"
) -> Frame:
    """An ``aggregate`` release's groups, one row per group and statistic:
    a column per ``group_by`` dimension (its value in the group), then
    ``statistic``, ``value``, ``std`` (of the noise on ``value``; 0 when
    exact) and ``exact``.

    ``group_by`` orders the dimension columns (as the request named them);
    without it they are in the order of the groups' keys.
    """
    result = release.to_dict().get("result")
    if result is None or "groups" not in result:
        raise ValueError(f"release {release.id} has no aggregate result (kind {release.kind})")
    groups = result["groups"]
    dimensions = list(group_by) if group_by else list(groups[0]["key"]) if groups else []
    columns: dict[str, list[Any]] = {name: [] for name in dimensions}
    columns.update({field.name: [] for field in AGGREGATE_COLUMNS})
    for group in groups:
        for name in dimensions:
            columns[name].append(group["key"][name])
        for field in AGGREGATE_COLUMNS:
            columns[field.name].append(group[field.name])
    schema = pa.schema([(name, pa.string()) for name in dimensions] + list(AGGREGATE_COLUMNS))
    return to_output(pa.table(columns, schema=schema), output)


def ledger_frame(entries: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Ledger entries as a pandas frame, one row per entry in ledger order:
    the entries' fields as columns (``created_at`` as a UTC timestamp; the
    nested ``budget_after``, ``spent_after``, ``details`` and ``loss`` as
    dicts)."""
    frame = pd.DataFrame.from_records(list(entries))
    if "created_at" in frame:
        frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
    return frame
