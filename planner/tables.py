"""Terminal tables that fit the terminal without clipping what identifies a row.

A :class:`Column` says whether it may be left out when the table is too wide
(``drop``: 0 never; otherwise higher ranks go first) and whether its cells may wrap.
Key columns -- a pool's name, a run's name, prices -- keep their full width; a
wrapping column (an event's text) is never narrower than its longest word, so a
pool id inside it is never cut either. Rich does the drawing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"
    drop: int = 0
    wrap: bool = False


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, width: int | None,
                 title: str | None = None, row_styles: Sequence[str | None] | None = None,
                 **table_options: Any) -> Table:
    """A table of ``rows`` (markup strings, one per column) no wider than ``width`` where it can be.

    Columns are left out by their ``drop`` rank until the table fits; ``width=None`` keeps them all.
    """
    plain = [[Text.from_markup(cell).plain for cell in row] for row in rows]

    def floor(i: int) -> int:
        cells = [row[i] for row in plain]
        if columns[i].wrap:
            words = [w for cell in cells for w in cell.split()]
            return max([len(columns[i].header), *map(len, words)])
        return max([len(columns[i].header), *map(len, cells)])

    widths = [floor(i) for i in range(len(columns))]

    def build(keep: list[int]) -> Table:
        options = {"title_justify": "left", "header_style": "bold", "box": box.SIMPLE_HEAD,
                   "padding": (0, 1, 0, 0), "pad_edge": False, **table_options}
        table = Table(title=title, **options)
        for i in keep:
            col = columns[i]
            table.add_column(col.header, justify=col.justify, no_wrap=not col.wrap, min_width=widths[i],
                             overflow="fold")
        for r, row in enumerate(rows):
            style = row_styles[r] if row_styles else None
            table.add_row(*(row[i] for i in keep), style=style)
        return table

    keep = list(range(len(columns)))
    table = build(keep)
    if width is None:
        return table
    # A table's minimum width: every wrapping column at its longest word, the others whole.
    wide = Console(width=10_000)
    for rank in sorted({c.drop for c in columns if c.drop}, reverse=True):
        if Measurement.get(wide, wide.options, table).minimum <= width:
            break
        keep = [i for i in keep if columns[i].drop != rank]
        table = build(keep)
    return table
