"""Tens of sides at 80×24: the table of sides (widgets/side_table.py) with the selected side's pane."""
from __future__ import annotations

from dataclasses import replace

from console.tui.app import ConsoleApp
from ops.model import HostConfig, RigConfig
from ops.tristate import Beat
from tests.tui.fakes import FakeBackend, polls_up, side_config, snapshot, until
from widgets.side_pane import SidePane
from widgets.side_table import SORT_KEYS, SideTable

N = 24


def many_sides() -> FakeBackend:
    names = [f"s{i + 1:02d}" for i in range(N)]
    rig = RigConfig(path="/etc/rig.yaml", name="big-rig", state_dir="/nonexistent/state", conda=("conda",),
                    poll_s=1.0, hosts={"local": HostConfig("local", "local")},
                    sides={n: side_config(n, 3000 + 10 * i, 9000 + i) for i, n in enumerate(names)})
    b = FakeBackend(rig=rig)
    for i, n in enumerate(names):   # progress i % 10 of 10; every fifth side hung, with a job id
        snap = snapshot(rig.sides[n], done=i % 10, beat=Beat.STALE if i % 5 == 4 else Beat.FRESH,
                        age_s=1600.0 if i % 5 == 4 else 2.0)
        b.snaps[n] = replace(snap, job={"id": f"{100 + i}", "state": "RUNNING", "node": "node7"})
    return b


def cells(app: ConsoleApp) -> list[list[str]]:
    t = app.main.query_one(SideTable).table
    return [[str(getattr(c, "plain", c)) for c in t.get_row_at(r)] for r in range(t.row_count)]


async def test_many_sides_are_a_sortable_filterable_table_with_a_detail_pane() -> None:
    b = many_sides()
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for side in b.rig.sides:
            app.show_snapshot(b.snaps[side])
        await pilot.pause(0.2)
        table = app.main.query_one(SideTable)
        assert table.region.height >= 5 and table.region.width == 80   # usable at 80×24
        rows = cells(app)
        assert len(rows) == N
        assert rows[4][0] == "s05" and "STALE" in rows[4][1] and rows[4][2] == "4/10" and rows[4][3] == "27m"
        assert rows[0][4] == "100@node7 RUNNING"
        assert len(app.main.query(SidePane)) == 1                    # one pane: the selected side's detail

        # Select by keys: the detail pane follows, and the app's actions act on that side.
        await pilot.press("down", "down")
        await pilot.pause(0.1)
        assert app.main.selected == "s03"
        assert app.main.query_one(SidePane).border_title.split()[0] == "s03"   # then its lifecycle word
        await polls_up(app, pilot)
        await pilot.press("g")
        await until(pilot, lambda: ("probe", "s03", True) in b.calls, "s03 probed with rpc")

        # Sort: `s` moves to the STATE column (FRESH before STALE), then PROGRESS.
        await pilot.press("s")
        await pilot.pause(0.1)
        states = [r[1] for r in cells(app)]
        assert states == sorted(states)
        await pilot.press("s")
        await pilot.pause(0.1)
        assert [r[2] for r in cells(app)][:3] == ["0/10", "0/10", "0/10"]
        assert app.main.selected == "s03"                             # the selection survives a sort

        # Filter: `/` then words; only the hung sides stay; Esc brings every row back.
        await pilot.press("slash", *"stale")
        await pilot.pause(0.2)
        rows = cells(app)
        assert len(rows) == N // 5 and all("STALE" in r[1] for r in rows)
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert len(cells(app)) == N


async def test_a_greyed_side_says_why_in_its_row() -> None:
    b = many_sides()
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for side in b.rig.sides:
            app.show_snapshot(b.snaps[side])
        app.main.pane("s07").greyed = "poll timed out after 5 s: last values shown"
        await pilot.pause(0.1)
        row = next(r for r in cells(app) if r[0] == "s07")
        assert row[1].startswith("UNKNOWN poll timed out")


async def test_sorted_by_heartbeat_age_a_beat_reorders_the_rows_once_and_keeps_the_selection() -> None:
    b = many_sides()
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for side in b.rig.sides:
            app.show_snapshot(b.snaps[side])
        await pilot.pause(0.2)
        await pilot.press("down", "down", "s", "s", "s")   # s03 selected; sort: STATE, PROGRESS, BEAT
        await pilot.pause(0.2)
        table = app.main.query_one(SideTable)
        assert SORT_KEYS[table.sort_col] == "beat" and app.main.selected == "s03"
        ages = {side: float((i * 37) % 50) + 0.5 for i, side in enumerate(b.rig.sides)}
        with app.batch_update():                             # a beat: every side's age moves
            for side, age in ages.items():
                snap = b.snaps[side]
                app.show_snapshot(replace(snap, heartbeat=replace(snap.heartbeat, age_s=age)))
        for _ in range(100):                                 # the reorder runs once the batch is shown
            if table.shown == sorted(ages, key=lambda s: ages[s]):
                break
            await pilot.pause(0.02)
        assert table.shown == sorted(ages, key=lambda s: ages[s])
        assert app.main.selected == "s03" and table.selected == "s03"
        assert app.main.query_one(SidePane).border_title.split()[0] == "s03"   # then its lifecycle word


async def test_a_beat_draws_again_only_the_lines_whose_text_moved(monkeypatch) -> None:
    """widgets/side_rows.py: a side whose heartbeat age moved has its one line drawn again; a side scrolled
    out of view, or shown again unchanged, draws nothing; a cursor move draws the two lines it touches."""
    from widgets.side_rows import SideRows
    b = many_sides()
    app = ConsoleApp(b, poll=False)
    drawn: list[str] = []
    real = SideRows._draw

    def counting(self, cells, style):
        drawn.append(str(cells[0]))
        return real(self, cells, style)
    monkeypatch.setattr(SideRows, "_draw", counting)
    async with app.run_test(size=(80, 24)) as pilot:
        for side in b.rig.sides:
            app.show_snapshot(b.snaps[side])
        await pilot.pause(0.2)
        assert "s01" in drawn and "s24" not in drawn          # only what is in view was ever drawn
        drawn.clear()
        s02 = b.snaps["s02"]
        app.show_snapshot(replace(s02, heartbeat=replace(s02.heartbeat, age_s=3.0)))   # 2s -> 3s
        await pilot.pause(0.1)
        assert drawn == ["s02"]
        drawn.clear()
        app.show_snapshot(replace(s02, heartbeat=replace(s02.heartbeat, age_s=3.2)))   # reads "3s" again
        s24 = b.snaps["s24"]
        app.show_snapshot(replace(s24, heartbeat=replace(s24.heartbeat, age_s=9.0)))   # out of view
        await pilot.pause(0.1)
        assert drawn == []
        await pilot.press("down")
        await pilot.pause(0.1)
        assert sorted(drawn) == ["s01", "s02"] and app.main.selected == "s02"
