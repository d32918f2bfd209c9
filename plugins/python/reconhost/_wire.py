"""The SDK's types as the contract's (``reconhost:plugin@0.2.0``): what :func:`reconhost.reconciler`
hands the host.

``types`` is the module componentize-py generates for the contract's ``types`` interface
(``wit_world.imports.types``); it is a parameter, so unit tests can pass the same generated
module loaded natively. The SDK's enums have the members of the generated ones, by name.
"""

from __future__ import annotations

from typing import Any, Callable

from ._model import (
    ChildKind,
    Comparison,
    ConditionCheck,
    ConditionStatus,
    EventType,
    FieldCheck,
    Info,
    Kind,
    Response,
    UpdateMethod,
    UpdateStrategy,
)


class Wire:
    """Conversions into the generated ``types`` of the contract; ``dumps`` writes JSON text."""

    def __init__(self, types: Any, dumps: Callable[[Any], str]) -> None:
        self.types = types
        self.dumps = dumps
        self._statuses = {s: types.ConditionStatus[s.name] for s in ConditionStatus}
        self._events = {e: types.EventType[e.name] for e in EventType}
        self._methods = {m: types.UpdateMethod[m.name] for m in UpdateMethod}
        self._comparisons = {c: types.Comparison[c.name] for c in Comparison}

    def kind(self, kind: Kind) -> Any:
        return self.types.KindRef(kind.api_version, kind.kind)

    def check(self, check: Any) -> Any:
        """A :class:`reconhost.Check` as a ``ready-check``."""
        t = self.types
        if isinstance(check, ConditionCheck):
            return t.ReadyCheck_Condition(t.ConditionCheck(check.type, self._statuses[check.status]))
        if isinstance(check, FieldCheck):
            operand = check.operand
            if operand.path is not None:
                wired = t.Operand_Field(operand.path)
            else:
                wired = t.Operand_Value(self.dumps(operand.json))
            return t.ReadyCheck_Field(t.FieldCheck(check.path, self._comparisons[check.comparison], wired))
        raise TypeError(f"a ready check is made by Check.condition, Check.field or Check.equals, not {check!r}")

    def strategy(self, strategy: UpdateStrategy) -> Any:
        return self.types.UpdateStrategy(
            self._methods[strategy.method], [self.check(c) for c in strategy.status_checks]
        )

    def child_kind(self, child: Any) -> Any:
        """A :class:`reconhost.ChildKind` (or a plain :class:`reconhost.Kind`, changed in place)
        as a ``child-kind``."""
        if isinstance(child, Kind):
            child = ChildKind(child)
        return self.types.ChildKind(self.kind(child.kind), self.strategy(child.strategy))

    def info(self, info: Info) -> Any:
        """:class:`reconhost.Info` as ``plugin-info``."""
        return self.types.PluginInfo(
            info.name,
            info.version,
            self.kind(info.parent),
            [self.child_kind(c) for c in info.children],
            [self.kind(k) for k in info.reads],
            info.finalizer,
            info.ignores_status_changes,
        )

    def response(self, response: Response) -> Any:
        """:class:`reconhost.Response` as ``response``."""
        t = self.types
        dumps = self.dumps
        statuses = self._statuses
        events = self._events
        check = self.check
        metadata = response.parent_metadata
        if metadata is not None:
            # Sorted by key, as the Rust SDK's maps are.
            metadata = t.MetadataPatch(sorted(metadata.labels.items()), sorted(metadata.annotations.items()))
        return t.Response(
            [t.DesiredChild(dumps(c.object), c.wave, [check(r) for r in c.ready_when]) for c in response.children],
            None if response.status is None else dumps(response.status),
            [t.Condition(c.type, statuses[c.status], c.reason, c.message) for c in response.conditions],
            [t.Event(events[e.type], e.reason, e.message) for e in response.events],
            response.requeue_ms,
            response.is_finalized,
            metadata,
        )
