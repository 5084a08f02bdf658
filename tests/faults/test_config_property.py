"""Property tests of the config loader: mutated valid configs and random YAML always give a RigConfig or a
ConfigError whose every issue names the file (and a line where the YAML has one) — never another exception.

Counted like the parser tests: the total is appended to $CARLA_FAULTS_COUNT_FILE as `config <N>`.
"""
from __future__ import annotations

import copy
import os

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ops.config import ConfigError, parse_config
from ops.model import RigConfig
from tests.unit.test_config import VALID

FILE = "/etc/carla-console/rig.yaml"
COUNT = {"inputs": 0}
# Derandomized: the same inputs every run, so a known bug (xfail, strict) fails every run, not by luck.
FAST = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BASE = yaml.safe_load(VALID)


@pytest.fixture(scope="module", autouse=True)
def _report_count():
    yield
    path = os.environ.get("CARLA_FAULTS_COUNT_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"config {COUNT['inputs']}\n")


def check(text: str) -> RigConfig | ConfigError:
    COUNT["inputs"] += 1
    try:
        rig = parse_config(text, FILE)
    except ConfigError as e:
        assert e.issues, "a ConfigError with no issue"
        for issue in e.issues:
            assert issue.file == FILE and issue.message
            assert str(issue).startswith(FILE)
            assert issue.line is None or 1 <= issue.line <= text.count("\n") + 2, (issue, text.count("\n"))
        return e
    assert isinstance(rig, RigConfig)
    assert rig.sides, "a rig without sides was accepted"
    tms = [s.evaluator.tm_port for s in rig.sides.values()]
    assert len(set(tms)) == len(tms), "two sides on one TM port were accepted"
    for s in rig.sides.values():
        assert s.server.host in rig.hosts and s.evaluator.host in rig.hosts
        assert 1 <= s.server.rpc_port <= 65533
    return rig


# ---- values to put anywhere ------------------------------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["8000", "@gateway", "~/x", "0x10", "1e3", "yes",
                                                           "--port", "ü名", "", " "]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(BASE) if p]


@st.composite
def mutated_config(draw) -> dict:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = data
        try:
            for k in path[:-1]:
                parent = parent[k]
            op = draw(st.sampled_from(["set", "delete", "add-key", "copy-side"]))
            if op == "set":
                parent[path[-1]] = draw(VALUES)
            elif op == "delete":
                del parent[path[-1]]
            elif op == "add-key" and isinstance(parent, dict):
                parent[draw(st.text(max_size=10))] = draw(VALUES)
            elif op == "copy-side":
                sides = data.get("sides")
                if isinstance(sides, dict) and sides:
                    name = draw(st.sampled_from(sorted(map(str, sides))))
                    sides[draw(st.text(min_size=1, max_size=6))] = copy.deepcopy(sides.get(name))
        except (KeyError, IndexError, TypeError):
            pass   # the path vanished under an earlier edit: fine, the document is still a mutation
    return data



def test_empty_value_is_a_config_error() -> None:
    check(VALID.replace("tm_port: 8010", "tm_port:", 1))


def test_server_without_rpc_port_is_a_config_error() -> None:
    check(VALID.replace("      rpc_port: 2041\n", "", 1))


# No shrinking while these are known to fail: the minimal cases are the two tests above.
NO_SHRINK = settings(FAST, phases=[Phase.explicit, Phase.generate])


@NO_SHRINK
@given(data=mutated_config())
def test_mutated_valid_config(data: dict) -> None:
    check(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))


@NO_SHRINK
@given(data=st.data())
def test_text_edits_of_the_valid_file(data: st.DataObject) -> None:
    text = VALID
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 40)))
        op = data.draw(st.sampled_from(["truncate", "delete", "insert", "dup", "tab"]))
        if op == "truncate":
            text = text[:i]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + data.draw(st.sampled_from(["\t", ": ", "- ", "{", "]", "&a ", "*a", "!!python/object ",
                                                         "\x00", "\ufeff", "'", '"', "#", "\n  x: 1\n", "<<: *a"])) + text[j:]
        elif op == "dup":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text.replace("  ", "\t", 1)
    check(text)


@FAST
@given(text=st.text(max_size=300))
def test_random_text(text: str) -> None:
    check(text)


@FAST
@given(doc=VALUES)
def test_random_yaml_documents(doc) -> None:
    check(yaml.safe_dump(doc, allow_unicode=True))


@settings(FAST, max_examples=50)
@given(n=st.integers(2, 6), tm=st.one_of(st.none(), st.integers(1, 65535)))
def test_shared_tm_port_is_always_refused_with_its_line(n: int, tm: int | None) -> None:
    data = copy.deepcopy(BASE)
    side = data["sides"]["ue4"]
    data["sides"] = {}
    for i in range(n):
        s = copy.deepcopy(side)
        s["server"]["rpc_port"] = 2000 + 10 * i
        if tm is None:
            s["evaluator"].pop("tm_port", None)          # the default 8000, on every side
        else:
            s["evaluator"]["tm_port"] = tm
        data["sides"][f"s{i}"] = s
    text = yaml.safe_dump(data, sort_keys=False)
    out = check(text)
    assert isinstance(out, ConfigError)
    assert any(i.key.endswith("tm_port") for i in out.issues), str(out)


def test_a_billion_laughs_is_refused_or_read_fast() -> None:
    import time
    text = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi"))
    t0 = time.perf_counter()
    assert isinstance(check(text), ConfigError)
    assert time.perf_counter() - t0 < 2.0
