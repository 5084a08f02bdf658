"""The lines of the table of sides, drawn through Textual's Line API: a header line that stays put, one
line a side, a cursor line. A side's line is drawn again only when its text moved.

Why not DataTable: each update_cell drops DataTable's whole render cache, so a beat that moved the
heartbeat age of every visible side drew every visible row again through Rich: on a rig of 32 sides that
was the largest part of the console's idle CPU after the polls themselves.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

Cell = Text | str
HEADER = "\0header"   # the header line's key in the strip cache (no side is named so)


class SideRows(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"side-rows--header", "side-rows--cursor"}
    DEFAULT_CSS = """
    SideRows {
        background: $surface;
        color: $foreground;
        & > .side-rows--header { text-style: bold; background: $panel; color: $foreground; }
        & > .side-rows--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus > .side-rows--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", show=False),
        Binding("down", "cursor(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "cursor_to(0)", show=False),
        Binding("end", "cursor_to(-1)", show=False),
    ]

    def __init__(self, widths: Sequence[int], header: Sequence[str], highlighted: Callable[[str], None],
                 **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.widths = tuple(widths)
        self.header: tuple[Cell, ...] = tuple(header)
        self.keys: list[str] = []
        self._index: dict[str, int] = {}
        self._cells: dict[str, tuple[Cell, ...]] = {}
        self.cursor_row = 0
        self._told: str | None = None          # the key `highlighted` was last called with
        self._highlighted = highlighted
        self._row_strips: dict[str, tuple[tuple, Strip]] = {}   # key -> (what it was drawn from, the strip)

    # -- content

    @property
    def row_count(self) -> int:
        return len(self.keys)

    def get_row_at(self, row: int) -> tuple[Cell, ...]:
        return self._cells[self.keys[row]]

    def set_header(self, labels: Sequence[Cell]) -> None:
        self.header = tuple(labels)
        self.refresh(Region(0, 0, self.size.width, 1))

    def set_rows(self, rows: Sequence[tuple[str, tuple[Cell, ...]]], cursor: str | None) -> None:
        """All the lines anew (another order or filter); the cursor on `cursor` if it is shown, else the first."""
        self.keys = [k for k, _ in rows]
        self._index = {k: i for i, k in enumerate(self.keys)}
        self._cells = dict(rows)
        self.virtual_size = Size(sum(w + 2 for w in self.widths), len(self.keys) + 1)
        self.refresh()
        self.move_cursor(self.keys.index(cursor) if cursor in self.keys else 0)

    def update_row(self, key: str, cells: tuple[Cell, ...]) -> None:
        row = self._index.get(key)
        if row is None or self._cells[key] == cells:
            return   # not shown (filtered out), or unchanged
        self._cells[key] = cells
        y = self._line_of(row)
        if y is not None:
            self.refresh(Region(0, y, self.size.width, 1))

    def _line_of(self, row: int) -> int | None:
        """The widget line showing row, or None when it is scrolled out of view."""
        y = row - self.scroll_offset.y + 1
        return y if 1 <= y < self.size.height else None

    # -- the cursor

    @property
    def cursor_key(self) -> str | None:
        return self.keys[self.cursor_row] if 0 <= self.cursor_row < len(self.keys) else None

    def move_cursor(self, row: int) -> None:
        if not self.keys:
            self.cursor_row = 0
            return
        row = max(0, min(row, len(self.keys) - 1))
        for y in (self._line_of(self.cursor_row), self._line_of(row)):
            if y is not None:
                self.refresh(Region(0, y, self.size.width, 1))
        self.cursor_row = row
        seen = max(1, self.scrollable_content_region.height - 1)   # lines below the header
        top = self.scroll_offset.y
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + seen:
            self.scroll_to(y=row - seen + 1, animate=False)
        key = self.keys[row]
        if key != self._told:
            self._told = key
            self._highlighted(key)

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step * max(1, self.scrollable_content_region.height - 1))

    def action_cursor_to(self, row: int) -> None:
        self.move_cursor(row if row >= 0 else len(self.keys) - 1)

    def on_click(self, event: Click) -> None:
        row = event.y - 1 + self.scroll_offset.y
        if event.y >= 1 and 0 <= row < len(self.keys):
            self.focus()
            self.move_cursor(row)

    # -- drawing (Textual's Line API)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = self.scroll_offset
        base = self.rich_style
        if y == 0:
            key, cells = HEADER, self.header
            style = base + self.get_component_rich_style("side-rows--header")
        else:
            row = y - 1 + scroll_y
            if not 0 <= row < len(self.keys):
                return Strip.blank(width, base)
            key = self.keys[row]
            cells = self._cells[key]
            style = base + self.get_component_rich_style("side-rows--cursor") if row == self.cursor_row else base
        drawn_from = (cells, style, width, scroll_x)
        cached = self._row_strips.get(key)
        if cached is not None and cached[0] == drawn_from:
            return cached[1]   # a line that reads as before is not drawn again
        strip = self._draw(cells, style).crop(scroll_x, scroll_x + width).extend_cell_length(width, style)
        self._row_strips[key] = (drawn_from, strip)
        return strip

    def _draw(self, cells: tuple[Cell, ...], style: Style) -> Strip:
        line = Text()
        for cell, w in zip(cells, self.widths):
            text = Text(cell) if isinstance(cell, str) else cell.copy()
            text.truncate(w, overflow="ellipsis", pad=True)
            line.append(" ")
            line.append_text(text)
            line.append(" ")
        return Strip(line.render(self.app.console), line.cell_len).apply_style(style)
