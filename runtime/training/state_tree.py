"""Flatten nested state dicts into ``{"a/b/0": leaf}`` and rebuild them.

Checkpoints are saved flat so that each tensor has one stable key: that key is what the
incremental writer hashes, what a manifest points at an older step directory for, and
what a partial DCP load asks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SEPARATOR = "/"


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _holds_tensor(value: Any) -> bool:
    if _is_tensor(value):
        return True
    if isinstance(value, Mapping):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return False


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Leaves of ``tree`` by slash-joined path.

    Mappings are always descended into; lists and tuples only when they hold a tensor,
    otherwise they are one (pickled) leaf. Empty containers produce no key and are kept by
    :func:`rebuild` from the template.
    """
    flat: dict[str, Any] = {}
    _flatten_into(flat, tree, prefix)
    return flat


def _flatten_into(flat: dict[str, Any], node: Any, key: str) -> None:
    if isinstance(node, Mapping):
        children = ((str(k), v) for k, v in node.items())
    elif isinstance(node, (list, tuple)) and _holds_tensor(node):
        children = ((str(i), v) for i, v in enumerate(node))
    else:
        if key in flat:
            raise ValueError(f"state key {key!r} occurs twice after flattening; rename one of them")
        flat[key] = node
        return
    for name, child in children:
        _flatten_into(flat, child, f"{key}{SEPARATOR}{name}" if key else name)


def rebuild(template: Any, flat: Mapping[str, Any], prefix: str = "") -> Any:
    """The structure of ``template`` with each leaf replaced by ``flat[path]``."""
    if isinstance(template, Mapping):
        return {k: rebuild(v, flat, _join(prefix, str(k))) for k, v in template.items()}
    if isinstance(template, (list, tuple)) and _holds_tensor(template):
        items = [rebuild(v, flat, _join(prefix, str(i))) for i, v in enumerate(template)]
        return items if isinstance(template, list) else tuple(items)
    return flat[prefix]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}{SEPARATOR}{name}" if prefix else name
