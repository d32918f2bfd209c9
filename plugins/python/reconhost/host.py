"""What the host offers a plugin during a call: its log, and reads from its cache.

Reads are served from the host's cache, never the network, and only for the kinds declared in
:attr:`reconhost.Info.reads`; the host remembers what each reconcile read, so a later change to
any object read (or to what a list would return) reconciles the parent again.

Outside a component (in unit tests) there is no host: :func:`get` and :func:`list` raise
:class:`ReadError`, and :func:`log` writes to stderr, unless a test installs a stand-in with
:func:`use`.
"""

from __future__ import annotations

import builtins
import json
import sys
from typing import Any, Optional, Protocol

from ._model import Kind

LEVELS = ("trace", "debug", "info", "warn", "error")


class ReadError(Exception):
    """A read the host refused: ``not-allowed`` (the kind is not declared in ``reads``),
    ``invalid`` (for example a bad label selector) or ``other``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class Host(Protocol):
    """What :func:`use` takes: the host's three imports, with JSON as Python values."""

    def log(self, level: str, message: str) -> None: ...

    def get(self, kind: Kind, namespace: str, name: str) -> Optional[dict[str, Any]]: ...

    def list(self, kind: Kind, namespace: str, label_selector: str) -> builtins.list[dict[str, Any]]: ...


_host: Optional[Host] = None
# The generated bindings, set by connect() when the module is built into a component.
_wit: Any = None


def use(host: Optional[Host]) -> None:
    """Installs a stand-in for the host (for unit tests); None removes it."""
    global _host
    _host = host


def connect(bindings: Any, types: Any, err: type) -> None:
    """Connects the generated bindings (``wit_world.imports.host``, its ``types`` and
    componentize-py's ``Err``). Called by :func:`reconhost.reconciler` at build time: a component
    can import only what was imported before componentize-py took its snapshot."""
    global _wit
    _wit = (bindings, types, err)


def _read_error(err: Any) -> ReadError:
    value = getattr(err, "value", err)
    reason = {
        "ReadError_NotAllowed": "not-allowed",
        "ReadError_Invalid": "invalid",
    }.get(type(value).__name__, "other")
    return ReadError(reason, str(getattr(value, "value", value)))


def log(level: str, message: str) -> None:
    """Writes a line to the host's log at ``level`` (trace, debug, info, warn, error), tagged
    with the plugin and the parent. Volume is capped per call: a plugin that logs past the cap
    fails the call."""
    if level not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    if _host is not None:
        _host.log(level, message)
    elif _wit is not None:
        bindings, types, _ = _wit
        bindings.log(types.Level[level.upper()], message)
    else:
        print(f"[{level}] {message}", file=sys.stderr)


def info(message: str) -> None:
    """Logs at info level."""
    log("info", message)


def _read(import_name: str, kind: Kind, *args: str) -> Any:
    """Calls the host's ``get`` or ``list`` import, its ``read-error`` raised as :class:`ReadError`."""
    if _wit is None:
        raise ReadError("other", "no host outside a component: install a stand-in with reconhost.host.use")
    bindings, types, Err = _wit
    try:
        return getattr(bindings, import_name)(types.KindRef(kind.api_version, kind.kind), *args)
    except Err as err:
        raise _read_error(err) from None


def get(kind: Kind, namespace: str, name: str) -> Optional[dict[str, Any]]:
    """One object of a declared ``reads`` kind (namespace empty for cluster-scoped kinds), or
    None if it does not exist."""
    if _host is not None:
        return _host.get(kind, namespace, name)
    text = _read("get", kind, namespace, name)
    return None if text is None else json.loads(text)


def list(kind: Kind, namespace: str = "", label_selector: str = "") -> builtins.list[dict[str, Any]]:
    """The objects of a declared ``reads`` kind in a namespace (empty: all) matching a label
    selector (Kubernetes syntax, e.g. ``app=web,tier!=db``; empty: everything)."""
    if _host is not None:
        return _host.list(kind, namespace, label_selector)
    return [json.loads(t) for t in _read("list", kind, namespace, label_selector)]
