"""The glue between a plugin function and the component's exports.

componentize-py builds a component from a module that defines ``WitWorld``, a class with the
world's exports as methods (``info`` and ``reconcile``). :func:`reconciler` defines it in the
plugin's module when the module is imported by componentize-py (where the generated
``wit_world`` bindings exist) and does nothing else, so the same module imports natively for
unit tests.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable

from . import host
from ._model import (
    Check,
    Comparison,
    ConditionStatus,
    Info,
    Operand,
    PermanentError,
    Request,
    Response,
    TransientError,
)
from ._wire import Wire

Reconcile = Callable[[Request], Response]


def reconciler(info: Info) -> Callable[[Reconcile], Reconcile]:
    """Declares ``info`` and exports the decorated function as the plugin's ``reconcile``.
    The function is returned unchanged, for unit tests."""

    def register(function: Reconcile) -> Reconcile:
        try:
            import wit_world  # type: ignore[import-not-found]
        except ImportError:
            return function  # natively: nothing to export
        module = sys.modules[function.__module__]
        module.WitWorld = _world(wit_world, info, function)  # type: ignore[attr-defined]
        from componentize_py_types import Err  # type: ignore[import-not-found]
        from wit_world.imports import host as bindings  # type: ignore[import-not-found]
        from wit_world.imports import types  # type: ignore[import-not-found]

        host.connect(bindings, types, Err)
        return function

    return register


def _world(wit_world: Any, info: Info, function: Reconcile) -> type:
    from componentize_py_types import Err  # type: ignore[import-not-found]
    from wit_world.imports import types  # type: ignore[import-not-found]

    # One encoder for every call: json.dumps with arguments builds a new one each time.
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    wire = Wire(types, dumps)
    # Converted once, here: a mistake in it fails the build, and the host's call is free.
    plugin_info = wire.info(info)
    loads = json.loads

    def parse(request: Any) -> Request:
        try:
            return Request(
                loads(request.parent),
                [loads(c) for c in request.children],
                loads(request.config),
                request.finalizing,
            )
        except ValueError as e:
            raise Err(types.Error_Permanent(f"the host sent invalid JSON: {e}")) from None

    class WitWorld(wit_world.WitWorld):  # type: ignore[misc, name-defined]
        def info(self) -> Any:
            return plugin_info

        def reconcile(self, request: Any) -> Any:
            parsed = parse(request)
            try:
                # Converted inside: a child that is not JSON is a bug like any other.
                return wire.response(function(parsed))
            except TransientError as e:
                raise Err(types.Error_Transient(e.message)) from None
            except PermanentError as e:
                raise Err(types.Error_Permanent(e.message)) from None
            except BaseException:
                # A bug, as a Rust panic is: the call traps. The traceback goes to stderr, whose
                # last lines the host puts in the error, so the exception itself must come last
                # (componentize-py's own trap would print its panic message after it).
                traceback.print_exc()
                sys.stderr.flush()
                os.abort()

    # Every call starts from the snapshot componentize-py takes once this module is imported.
    # Running the glue's own paths here puts CPython's specialised bytecode and json's warmed
    # state into that snapshot, so no call pays for them (measured: 7-10 % of a webapp call).
    # The plugin's function is not run: it could do anything.
    sample = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n", "labels": {"a": "b"}},
              "spec": {"list": [{"k": 1, "v": True, "x": None, "f": 1.5}]}}
    text = dumps(sample)
    for _ in range(32):
        parse(types.Request(text, [text], "{}", False))
        wire.response(Response().child(sample).with_status({"n": 1}).ready(True, "R", "m").warning("R", "m"))
    # The rest of the contract once, so that a mistake in its conversion fails the build.
    checks = [Check.condition("A", ConditionStatus.UNKNOWN), Check.equals("a", 1),
              Check.field("b", Comparison.AT_LEAST, Operand.field("c"))]
    wire.response(Response().child_in_wave(1, sample, checks).event("R", "m").requeue_after_ms(1)
                  .parent_label("a", "b").parent_annotation("c", "d").finalized())

    return WitWorld
