"""The operator's keymap file: rebind any key of the console by its binding id (as Posting does).

    # ~/.config/carla-console/keymap.yaml  (or --keymap FILE)
    launch: ctrl+l          # one key, or several: "ctrl+l,f5"
    detail: i,enter,space

The ids are those of the bindings (console/tui/screens/main.py and the app): `keymap_ids()` lists them.
Applied with Textual's App.set_keymap. Every mistake (unknown id, a value that is not a key string, bad
YAML) is reported at once, naming the file, the line and the id; the console then does not start.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from console.tui.screens.main import DESTRUCTIVE_BINDINGS, SAFE_BINDINGS

APP_IDS = ("quit",)


class KeymapError(Exception):
    pass


def default_keymap_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "carla-console" / "keymap.yaml"


def keymap_ids() -> list[str]:
    ids = [getattr(b, "id", None) for b in (*SAFE_BINDINGS, *DESTRUCTIVE_BINDINGS)]
    return sorted({i for i in ids if i} | set(APP_IDS))


def load_keymap(path: Path, *, required: bool) -> dict[str, str]:
    """The keymap in `path`; {} when the file is absent and not `required` (the default path)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise KeymapError(f"{path}: no such keymap file") from None
        return {}
    except OSError as e:
        raise KeymapError(f"{path}: cannot read: {e}") from None
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        raise KeymapError(f"{path}: not YAML: {e}") from None
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise KeymapError(f"{path}:{node.start_mark.line + 1}: a keymap is a mapping of binding id to keys")
    known = keymap_ids()
    errors: list[str] = []
    keymap: dict[str, str] = {}
    for k, v in node.value:
        line = k.start_mark.line + 1
        key = k.value if isinstance(k, yaml.ScalarNode) else None
        if key not in known:
            errors.append(f"{path}:{line}: {key!r}: unknown binding id (known: {', '.join(known)})")
            continue
        if not isinstance(v, yaml.ScalarNode) or not v.value.strip() or v.tag != "tag:yaml.org,2002:str":
            errors.append(f"{path}:{line}: {key}: the keys must be a string, such as \"ctrl+l\" or \"f5,l\"")
            continue
        keymap[key] = v.value.strip()
    if errors:
        raise KeymapError("\n".join(errors))
    return keymap
