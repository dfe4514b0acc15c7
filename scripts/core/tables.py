"""How the kit shows what it computed in the terminal (costs, benches, plans): aligned text
tables, so that every table lines up the same way (their PNGs: scripts/core/charts.py)."""


def text_table(rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> list[str]:
    """Rows of cells (the header first) as lines: the columns in `left` (names) aligned
    left, the others (figures) right, two spaces between columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) if i in left else cell.rjust(width)
                      for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def cell(value, spec: str, unit: str = "") -> str:
    """A figure formatted by `spec` (and its unit), or '-' where there is none."""
    return "-" if value is None else format(value, spec) + unit
