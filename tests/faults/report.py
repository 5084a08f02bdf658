"""Run the fault suite and print its summary, counted by the suite itself.

    python tests/faults/report.py [extra pytest args]

pytest runs tests/faults with $CARLA_FAULTS_COUNT_FILE set; the scenarios (tests/faults/conftest.py and
harness_kit.py) append `scenario <name> <outcome>`, `touched <n>`, `lost <n>`, and the property tests
`parsers <n>` / `config <n>` / `hostile <n>` (each hostile input a scenario planted). The last line printed is

    faults: N scenarios, P passed, T wrongly touched, L records lost, I inputs tried

and the exit code is pytest's (non-zero also when a scenario did not pass or a counter is not 0).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INPUT_KINDS = ("parsers", "config", "hostile")


def summarize(lines: list[str]) -> tuple[dict[str, str], int, int, int]:
    scenarios: dict[str, str] = {}
    touched = lost = inputs = 0
    for ln in lines:
        kind, _, rest = ln.strip().partition(" ")
        if kind == "scenario":
            name, _, outcome = rest.rpartition(" ")
            # A scenario passes only if every line it wrote says so (call passed, teardown clean).
            if scenarios.get(name, "passed") == "passed":
                scenarios[name] = outcome
        elif kind == "touched":
            touched += int(rest)
        elif kind == "lost":
            lost += int(rest)
        elif kind in INPUT_KINDS:
            inputs += int(rest)
    return scenarios, touched, lost, inputs


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="carla-faults-") as tmp:
        count_file = Path(tmp) / "counts.txt"
        count_file.touch()
        env = {**os.environ, "CARLA_FAULTS_COUNT_FILE": str(count_file)}
        rc = subprocess.run([sys.executable, "-m", "pytest", "tests/faults", "-q", "-rfEx", *argv],
                            cwd=REPO, env=env).returncode
        scenarios, touched, lost, inputs = summarize(count_file.read_text().splitlines())
    passed = sum(1 for o in scenarios.values() if o == "passed")
    for name, outcome in sorted(scenarios.items()):
        print(f"  {outcome:8} {name}")
    print(f"faults: {len(scenarios)} scenarios, {passed} passed, {touched} wrongly touched, "
          f"{lost} records lost, {inputs} inputs tried")
    ok = rc == 0 and passed == len(scenarios) and touched == 0 and lost == 0
    return rc if rc else (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
