"""The Textual app: the poll loops, the action flows, and the screens they show.

Polling (Dolphie's rule): one long-lived loop per side that polls, then waits for the next beat (or a
re-probe), so a slow host never piles up probes; each poll runs under a timeout, and a poll that hangs or
fails greys only its own pane. A side's polling pauses while a confirmation modal is open for it, so the
screen under the modal does not move while the operator reads the plan.

Destructive actions (Harlequin's rule): the backend builds a Plan, the app shows the modal, the operator's
Confirmation goes back to the backend whose guard re-verifies and acts. ops never opens a dialog.
"""
from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import termios
import time
from collections.abc import Iterable
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from console.tui import story
from console.tui.audit_fold import AuditFold
from console.tui.protocol import ActionResult, Backend, Unavailable
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.detail import DetailScreen
from console.tui.screens.help import HelpScreen
from console.tui.screens.main import DESTRUCTIVE_ACTIONS, MainScreen, main_screen
from console.tui.screens.report import ReportScreen
from console.tui.screens.wizard import RecoveryWizard
from ops.actions.guard import Plan
from ops.platform.timeouts import within
from ops.probes.prober import SideSnapshot
from widgets.event_log import EventLog
from widgets.rig_header import RigHeader

ACTION_LABELS = {"adapter": "adapter polling", "launch": "launch", "reclaim": "reclaim", "recover": "recover",
                 "restart-server": "restart server",
                 "ports": "port scan"}
PLAN_TIMEOUT_S = 60.0       # building a plan probes with RPC: conda start + import carla + the call
PORTS_TIMEOUT_S = 60.0
AUDIT_SHOWN = 50            # audit lines shown at start (older ones stay in the file)
SHOW_HOLD_S = 0.05          # a finished poll waits this long for the other sides of its beat


def _terminal_alive() -> bool:
    try:
        termios.tcgetattr(sys.__stdin__.fileno())  # type: ignore[union-attr]  # None: AttributeError below
    except (termios.error, OSError, ValueError, AttributeError):
        return False
    return True


def _detach_terminal() -> None:
    """The terminal is gone (SSH dropped, tmux killed): point stdin/stdout/stderr at /dev/null.

    Textual's shutdown still writes its terminal-restoring sequences; into a hung-up pty a write fails,
    its writer thread stops, and the next writes block the shutdown forever (seen under load). Into
    /dev/null they succeed, so the normal exit path runs to the end, the demo's teardown included."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in (0, 1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            continue   # that stream is already closed: nothing can block on it
    os.close(null)


# A side's loop sleeps past at most this many quiet beats in a row (Backend.quiet_beat): a heartbeat read
# every few beats is what a served side's row shows.
QUIET_BEATS_MAX = 8
RESOURCES_EVERY_S = 30.0   # disks and memory move slowly; nvidia-smi costs a few hundred ms


class ConsoleApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "carla-console"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    ENABLE_COMMAND_PALETTE = True
    # q quits from every screen (an Input that has the focus takes the letter first); Esc steps back.
    BINDINGS = [Binding("q", "quit", "Quit", id="quit")]

    def __init__(self, backend: Backend, *, read_only: bool = False, poll: bool = True,
                 poll_s: float | None = None, keymap: dict[str, str] | None = None) -> None:
        super().__init__()
        if keymap:
            self.set_keymap(keymap)   # the operator's keymap file (console/tui/keymap.py)
        self.backend = backend
        self.read_only = read_only
        self.poll_enabled = poll            # tests with frozen snapshots switch the poll loop off
        self.poll_s = poll_s if poll_s is not None else backend.rig.poll_s
        self.sides = list(backend.rig.sides)
        self.snaps: dict[str, SideSnapshot] = {}
        self._poll_inflight: dict[str, float] = {}     # side -> monotonic start of its running poll
        self._poll_paused: set[str] = set()
        self._poll_missed: set[str] = set()            # sides whose poll came due while paused
        self._poll_wanted: dict[str, bool | None] = {}  # side -> rpc flag of the poll asked for
        self._poll_wake: dict[str, asyncio.Event] = {}   # set: that side's loop polls now
        self._arrived: dict[str, SideSnapshot] = {}    # snapshots held for one compositor pass
        self._show_timer: Any = None
        self._audit_seen = 0
        self._audit_fold = AuditFold()
        self._action_busy = False
        self._executing = False      # a confirmed destructive step is being carried out
        self.exit_reason = "quit"

    # ----- start / stop ---------------------------------------------------------------------------
    @property
    def acting(self) -> bool:
        """A confirmed destructive step is under way (here or in the recovery wizard)."""
        return self._executing or any(getattr(s, "busy_destructive", False) for s in self.screen_stack)

    async def action_quit(self) -> None:
        # Quitting mid-kill would cancel the guard between its TERM and its verify: finish first.
        if self.acting:
            self.notify("a destructive step is being carried out: q again once it has ended",
                        severity="warning", timeout=5)
            return
        await super().action_quit()

    async def on_mount(self) -> None:
        self.main = main_screen(self.backend.rig.name, self.sides, self.read_only)
        if self.main.tabular:
            # A table of sides shows no pane's log (the detail view reads its own): a poll reads none, which
            # halves a served side's light poll (a stat and a tail) on a rig of tens of sides.
            self.backend.log_tail = 0
        await self.push_screen(self.main)      # mounted before any worker touches its widgets
        self._install_signals()
        # Everything built so far (imports, widgets, styles) lives as long as the app: move it out of the
        # collector's sight, so a full collection during a key press walks only what polls allocate.
        gc.freeze()
        # The rig opens (host imports, the first probes and their subprocesses) once the first frame is
        # drawn: it would otherwise compete with the frame for the CPU, and the snapshot comes no later.
        self.call_after_refresh(self.start_backend)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Workers run with exit_on_error=False so one broken flow cannot end the console; their errors
        # must still be seen: they go to the event log.
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            err = event.worker.error
            try:
                self.note(f"internal error in {event.worker.name or 'worker'}: {type(err).__name__}: {err}")
            except Exception:
                self.log.error(f"worker {event.worker.name}: {err!r}")

    @work(group="backend", exit_on_error=False)
    async def start_backend(self) -> None:
        try:
            await self.backend.start()
        except Exception as e:
            self.note(f"cannot open the rig: {type(e).__name__}: {e}")
            for side in self.sides:
                self.main.pane(side).greyed = f"rig not opened: {e}"
            return
        self.feed_audit(first=True)
        for w in self.backend.rig.warnings:   # config warnings (a DEBUGGING run among them) once at start
            self.note(f"config: {w}")
        self._tick_on_beat()
        for side in self.sides:
            self._poll_wake[side] = asyncio.Event()
            self.run_worker(self._poll_loop(side), group=f"poll-{side}", exit_on_error=False)
            if self.poll_enabled:
                self._start_poll(side, None)
        if self.poll_enabled and hasattr(self.backend, "resources"):
            self.run_worker(self._resources_loop(), group="resources", exit_on_error=False)

    async def _resources_loop(self) -> None:
        """Disk, memory, VRAM budget and foreign GPU load warnings (issue 21) into the event log, each once
        when it appears and once when it clears; a reading that fails says so, it never blocks a poll."""
        shown: set[str] = set()
        while True:
            await asyncio.sleep(RESOURCES_EVERY_S)
            try:
                now = set(await asyncio.wait_for(self.backend.resources(dict(self.snaps)), RESOURCES_EVERY_S))
            except Exception as e:
                self.note(f"resources: cannot read ({type(e).__name__}: {e})")
                continue
            for w in sorted(now - shown):
                self.note(f"resources: {w}")
            for w in sorted(shown - now):
                self.note(f"resources: cleared: {w}")
            shown = now

    def _install_signals(self) -> None:
        # SIGHUP (the SSH session or the terminal went away) and SIGTERM end the console only: runs are
        # detached harnesses in their own sessions, and nothing here signals them on the way out.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        self._guard_sigcont()

    def _guard_sigcont(self) -> None:
        """Resume after SIGCONT only while the terminal is still there.

        A hung-up tty sends SIGHUP *and* SIGCONT to the foreground group. Textual's driver answers SIGCONT
        by re-entering application mode (a new writer thread) in the middle of our SIGHUP shutdown; the
        shutdown then blocks for ever writing into the abandoned writer's full queue (caught by the tmux
        end-to-end test under load). Ctrl+Z / fg on a live terminal still works as before."""
        try:
            resume = signal.getsignal(signal.SIGCONT)
        except (AttributeError, ValueError):
            return
        if not callable(resume):
            return

        def on_sigcont(signum, frame) -> None:
            if _terminal_alive():
                resume(signum, frame)

        try:
            signal.signal(signal.SIGCONT, on_sigcont)
        except ValueError:   # not the main thread (Pilot tests drive the app from elsewhere)
            pass

    def _on_signal(self, sig: signal.Signals) -> None:
        self.exit_reason = signal.Signals(sig).name
        if sig == signal.SIGHUP:
            _detach_terminal()
        self.exit(0)

    async def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        try:
            await asyncio.wait_for(self.backend.close(), 10.0)
        except Exception:  # closing connections on the way out must not turn a clean exit into a traceback
            pass

    # ----- polling ----------------------------------------------------------------------------------
    def poll_timeout(self, side: str) -> float:
        # The prober's own calls time out at probe_timeout_s; an RPC probe adds conda start-up and import.
        return self.backend.rig.sides[side].server.probe_timeout_s + 25.0

    def _to_next_beat(self, side: str | None = None) -> float:
        """Seconds to the next whole poll period on the monotonic clock (at least half a period away); for
        a side, to the next such beat its poll would read something on (Backend.quiet_beat).

        Every side's next poll starts on the same beat, so their snapshots land together and one
        compositor pass shows them all, instead of one repaint per side at drifting times."""
        period = self.poll_s
        now = time.monotonic()
        delay = period - (now % period)
        delay = delay + period if delay < period / 2 else delay
        if side is not None:
            for _ in range(QUIET_BEATS_MAX):
                if not self.backend.quiet_beat(side, int((now + delay) // period)):
                    break
                delay += period
        return delay

    def _start_poll(self, side: str, rpc: bool | None) -> None:
        """Ask for a poll of side now (rpc as for Prober.side); one asked during a poll runs after it."""
        wake = self._poll_wake.get(side)
        if wake is None:        # the rig never opened: nothing polls
            return
        if rpc or side not in self._poll_wanted:
            self._poll_wanted[side] = rpc
        wake.set()

    async def _poll_loop(self, side: str) -> None:
        """Side's polls, one at a time, for the app's life: a poll, then a wait for the next beat.

        A loop and not a worker (and a timer) per poll: those cost more than the poll on an idle rig."""
        loop = asyncio.get_running_loop()
        wake = self._poll_wake[side]
        while True:
            beat = loop.call_later(self._to_next_beat(side), wake.set) if self.poll_enabled else None
            try:
                await wake.wait()
            finally:
                if beat is not None:
                    beat.cancel()
            wake.clear()
            if side in self._poll_paused:
                self._poll_missed.add(side)
                continue
            rpc = self._poll_wanted.pop(side, None)
            try:
                await self._poll(side, rpc)
            except Exception as e:  # never leave the side without polls
                self.note(f"internal error in the poll of {side}: {type(e).__name__}: {e}")

    async def _poll(self, side: str, rpc: bool | None) -> None:
        pane = self.main.pane(side)
        timeout = self.poll_timeout(side)
        self._poll_inflight[side] = time.monotonic()
        try:
            snap = await within(timeout, self.backend.probe(side, rpc))
        except asyncio.TimeoutError:
            pane.greyed = f"poll timed out after {timeout:.0f} s: last values shown"
            self._hosts_unknown(side)
        except Exception as e:  # one side's broken poll must not stop the others or the app
            pane.greyed = f"poll failed: {type(e).__name__}: {e}"
            self._hosts_unknown(side)
        else:
            self._poll_inflight.pop(side, None)   # before the hold: it waits only for the other sides
            self._hold(snap)
        finally:
            self._poll_inflight.pop(side, None)

    def _hold(self, snap: SideSnapshot) -> None:
        """Show a side's snapshot together with the others of its beat.

        The sides of a beat finish tens of milliseconds apart; shown one by one, each costs its own
        compositor pass (most of the console's idle CPU). A snapshot waits for the sides still being
        probed, at most SHOW_HOLD_S, so a hung side never holds the others back longer than that."""
        self._arrived[snap.name] = snap
        # Still to come in this beat: the polls under way, and those woken but not started yet (a local
        # side's poll runs to its end without a pause, before the next side's loop has even run).
        name = snap.name
        coming = (any(s != name for s in self._poll_inflight)
                  or any(wake.is_set() and s != name and s not in self._poll_paused
                         for s, wake in self._poll_wake.items()))
        if not coming:
            self._show_arrived()
        elif self._show_timer is None:   # a loop callback: a Textual timer is a task and a message
            self._show_timer = asyncio.get_running_loop().call_later(SHOW_HOLD_S, self._show_arrived)

    def _show_arrived(self) -> None:
        if self._show_timer is not None:
            self._show_timer.cancel()
            self._show_timer = None
        arrived, self._arrived = self._arrived, {}
        try:
            with self.batch_update():
                for snap in arrived.values():
                    self.show_snapshot(snap)
        except NoMatches:
            pass   # the hold ended while the app was exiting: its panes are gone, nothing to show
        except Exception as e:  # a loop callback: an error would only reach asyncio's stderr logger
            self.note(f"internal error showing snapshots: {type(e).__name__}: {e}")

    def show_snapshot(self, snap: SideSnapshot) -> None:
        prev = before = self.snaps.get(snap.name)
        if snap is before and self.main.pane(snap.name).greyed is None:
            return   # a beat that read nothing for this side (Prober.side beat_due): it is shown already
        if story.needs_human(before, snap) and snap.side.supervisor.bell:
            self.bell()   # a side needs a human: the terminal rings (supervisor.bell); the story says why
        self.snaps[snap.name] = snap
        # Widgets are looked up only when there is something for them: most snapshots of a beat of tens of
        # sides change neither the story nor a host's reachability.
        changes = story.changes(prev, snap, read_only=self.read_only)
        if changes:
            log = self.main.query_one(EventLog)
            for change in changes:
                log.add_change(change.side, change.word, change.text, snap.at)
        pane = self.main.pane(snap.name)
        pane.show(snap)
        pane.greyed = None
        seen = {ev.what.removeprefix("process table of "): "reachable" if ev.ok else "UNREACHABLE"
                for ev in (*snap.server.verdict.evidence, *snap.evaluator.verdict.evidence)
                if ev.what.startswith("process table of ")}
        if seen:
            header = self.main.query_one(RigHeader)
            if any(header.hosts.get(h) != state for h, state in seen.items()):
                header.hosts = {**header.hosts, **seen}

    def _hosts_unknown(self, side: str) -> None:
        cfg = self.backend.rig.sides[side]
        header = self.main.query_one(RigHeader)
        header.hosts = {**header.hosts, cfg.server.host: "UNKNOWN", cfg.evaluator.host: "UNKNOWN"}

    def _tick_on_beat(self) -> None:
        """_on_beat now and on every beat after: on the polls' own beat (the same loop wake-up as theirs), and
        a plain loop callback, not a Textual timer (a task and a message each second)."""
        self._on_beat()
        if self.is_running:
            asyncio.get_running_loop().call_later(self._to_next_beat(), self._tick_on_beat)

    def _on_beat(self) -> None:
        # Runs inline in the event loop: keep it cheap and exception-free.
        try:
            now = time.monotonic()
            for side, started in list(self._poll_inflight.items()):
                waited = now - started
                if waited > max(3 * self.poll_s, 3.0):
                    self.main.pane(side).greyed = f"probing for {waited:.0f} s (host slow or hung)"
            self.feed_audit()
        except Exception as e:
            self.log.error(f"tick: {e!r}")

    def pause(self, side: str) -> None:
        self._poll_paused.add(side)

    def resume(self, side: str) -> None:
        self._poll_paused.discard(side)
        if side in self._poll_missed:
            self._poll_missed.discard(side)
            self._start_poll(side, None)

    def on_confirm_screen_opened(self, msg: ConfirmScreen.Opened) -> None:
        self.pause(msg.side)

    def on_confirm_screen_closed(self, msg: ConfirmScreen.Closed) -> None:
        self.resume(msg.side)

    def reprobe(self, side: str) -> None:
        """`g`: probe now, with the carla RPC check, without waiting for the cadence."""
        self._start_poll(side, True)
        self.notify(f"re-probing {side}", timeout=2)

    # ----- event log ------------------------------------------------------------------------------
    def feed_audit(self, first: bool = False) -> None:
        """New audit records to the event log, one line per operation (console/tui/audit_fold.py)."""
        records = self.backend.audit()
        new: list[dict[str, Any]] = []
        if records is not None:
            if len(records) < self._audit_seen:      # the file was rotated or replaced: start over
                self._audit_seen = 0
                self._audit_fold.reset()
            start = max(self._audit_seen, len(records) - AUDIT_SHOWN) if first else self._audit_seen
            new = records[start:]
            self._audit_seen = len(records)
        elif not self._audit_fold.pending:
            return
        shown = self._audit_fold.lines(new, time.time(), backlog=first)
        if shown:
            log = self.main.query_one(EventLog)
            for rec in shown:
                log.add_audit(rec)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """On the main screen a message goes to the event log's title row, not a toast: a toast would
        cover the log's last lines, the ones an operator reads. Other screens keep Textual's toasts."""
        main = getattr(self, "main", None)
        if isinstance(main, MainScreen) and self.screen is main:
            main.say(message, severity, 6.0 if timeout is None else timeout)
            return
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def note(self, text: str) -> None:
        self.main.query_one(EventLog).add_note(text)

    def progress(self, text: str) -> None:
        """How an action is getting on: shown while it runs (title row), not a line of the story."""
        self.notify(text, timeout=4)

    # ----- actions ----------------------------------------------------------------------------------
    def unavailable(self, action: str, why: str) -> None:
        self.notify(f"{action}: not available yet ({why})", severity="warning", timeout=6)
        self.note(f"{action}: not available yet ({why})")

    def show_detail(self, side: str) -> None:
        snap = self.snaps.get(side)
        if snap is None:
            self.notify(f"side {side}: no snapshot yet, nothing to detail", severity="warning", timeout=4)
            return
        self.push_screen(DetailScreen(snap))

    def show_help(self) -> None:
        # Built once and kept (an installed screen survives its dismiss): composing and styling it anew on
        # every `?` was most of the time the help took to appear.
        if not self.is_screen_installed("help"):
            self.install_screen(HelpScreen(self.read_only), "help")
        if self.get_screen("help") not in self.screen_stack:   # from the palette while it is open
            self.push_screen("help")

    def show_results(self, side: str) -> None:
        """`d`: the per-route results of the selected side (n switches to the rig), from the last snapshots."""
        from console.tui.screens.results import ResultsScreen
        self.push_screen(ResultsScreen(self.snaps, scope=side))

    @work(group="ports", exclusive=True, exit_on_error=False)
    async def scan_ports(self) -> None:
        self.notify("scanning ports…", timeout=2)
        try:
            report = await asyncio.wait_for(self.backend.scan_ports(), PORTS_TIMEOUT_S)
        except Unavailable as e:
            self.unavailable("ports", str(e))
            return
        except Exception as e:
            self.note(f"ports: failed: {type(e).__name__}: {e}")
            self.notify(f"ports: failed: {e}", severity="error")
            return
        for side, status in report.status.items():
            if side in self.sides:
                self.main.pane(side).ports = status
        self.note(f"ports: {report.conflicts} conflict(s)")
        self.push_screen(ReportScreen("Port scan", report.lines))

    def _begin_action(self, action: str) -> bool:
        if self.read_only and action in DESTRUCTIVE_ACTIONS:
            self.notify(f"{action}: read-only console", severity="warning")
            return False
        if self._action_busy:
            self.notify("another action is running: wait for it", severity="warning")
            return False
        self._action_busy = True
        return True

    def guarded(self, action: str, side: str) -> None:
        if self._begin_action(action):
            self._guarded(action, side)

    @work(group="action", exit_on_error=False)
    async def _guarded(self, action: str, side: str) -> None:
        try:
            await self._guarded_flow(action, side)
        finally:
            self._action_busy = False

    def checking(self, action: str, side: str) -> str:
        """What building the plan of `action` measures: shown in the modal while it runs."""
        cfg = self.backend.rig.sides[side]
        srv, ev = cfg.server.host, cfg.evaluator.host
        hosts = srv if srv == ev else f"{srv} and {ev}"
        return {"launch": f"process tables of {hosts}, the server's RPC, ports, conda env, checkpoint",
                "reclaim": f"the server's processes and clients on {srv} (RPC)",
                "adapter": f"the server's processes and the GPUs' VRAM on {srv}"}.get(action, f"side {side}")

    def finished_refusal(self, side: str) -> str | None:
        """A launch on a side whose routes are all done is refused before any plan: it would only start an
        evaluator with nothing to run (or, without --resume, run the whole route file again over the
        results)."""
        snap = self.snaps.get(side)
        if snap is None:
            return None
        prog = snap.evaluator.checkpoint.progress
        done = prog is not None and prog[1] > 0 and prog[0] >= prog[1]
        if snap.evaluator.phase == "finished" or (done and snap.evaluator.phase != "running"):
            routes = f"{prog[0]}/{prog[1]} routes" if prog is not None else "its routes"
            return (f"side {side} has finished ({routes} done): nothing left to run; its results stay in "
                    f"{snap.side.evaluator.checkpoint}")
        return None

    async def _guarded_flow(self, action: str, side: str) -> None:
        label = ACTION_LABELS.get(action, action)
        if action == "launch":
            why = self.finished_refusal(side)
            if why is not None:
                self.notify(f"launch refused: {why}", severity="warning", timeout=8)
                self.note(f"{side} launch refused: {why}")
                return

        said: list[str] = []   # what the event log was already told

        async def build() -> Plan:
            try:
                return await asyncio.wait_for(self.backend.plan(action, side), PLAN_TIMEOUT_S)
            except Unavailable as e:
                self.unavailable(action, str(e))
                said.append("unavailable")
                raise
            except asyncio.TimeoutError:
                raise RuntimeError(f"no plan within {PLAN_TIMEOUT_S:.0f} s (a host slow or hung): "
                                   "nothing will be touched") from None

        # The modal opens at once and says what is being measured: on a hung host the plan takes seconds.
        res = await self.push_screen_wait(
            ConfirmScreen(None, label, reprobe=build, side=side, checking=self.checking(action, side)))
        if res.plan is None:
            if not said:
                self.note(f"{side} {action}: left before a plan was built (nothing touched)")
            return
        if not res.confirmation.proceed:
            self.note(f"{side} {action}: cancelled by the operator (nothing touched)")
            return
        self.notify(f"{label} on {side}: running…", timeout=3)
        self._executing = True
        try:
            # Progress goes to the title row: the operation's one event-log line is its audit record.
            out: ActionResult = await self.backend.execute(action, res.plan, res.confirmation, self.progress)
        except Unavailable as e:
            self.unavailable(action, str(e))
            return
        except Exception as e:
            self.notify(f"{action}: failed: {type(e).__name__}: {e}", severity="error")
            self.note(f"{side} {action}: failed: {type(e).__name__}: {e}")
            return
        finally:
            self._executing = False
        self.notify(f"{label} on {side}: {'done' if out.ok else 'FAILED'}: {out.detail}",
                    severity="information" if out.ok else "error", timeout=8)
        self.feed_audit()
        self._start_poll(side, True)

    def recover(self, side: str) -> None:
        if not self._begin_action("recover"):
            return
        try:
            driver = self.backend.recovery(side)
        except Unavailable as e:
            self._action_busy = False
            self.unavailable("recover", str(e))
            return

        def done(_: None) -> None:
            self._action_busy = False
            self.feed_audit()
            self._start_poll(side, True)

        self.push_screen(RecoveryWizard(driver), done)

    # ----- command palette --------------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        main = getattr(self, "main", None)
        if main is None:
            return
        side = main.selected
        yield SystemCommand("Re-probe", f"probe side {side} now (g)", lambda: self.reprobe(main.selected))
        yield SystemCommand("Port scan", "winNAT exclusions and planned ports (p)", self.scan_ports)
        yield SystemCommand("Help", "keys and state words (?)", self.show_help)
        if self.read_only:
            return
        yield SystemCommand("Adapter polling", f"side {side} (a)", lambda: self.guarded("adapter", main.selected))
        yield SystemCommand("Launch", f"start side {side}'s harness (l)", lambda: self.guarded("launch", main.selected))
        yield SystemCommand("Recover", f"guided recovery of side {side} (r)", lambda: self.recover(main.selected))
        yield SystemCommand("Reclaim", f"stop side {side}'s IDLE server (x)", lambda: self.guarded("reclaim", main.selected))
