"""The plugin's view of one reconcile: what it declares, what it gets, what it answers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

JSON = Any
"""A JSON value as :func:`json.loads` returns it."""


@dataclass(frozen=True)
class Kind:
    """A kind of Kubernetes object: ``apiVersion`` (``group/version``, or ``version`` for the core
    group) and ``kind``, e.g. ``Kind("apps/v1", "Deployment")``."""

    api_version: str
    kind: str


class ConditionStatus(enum.Enum):
    """Status of a condition, as Kubernetes writes it."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class EventType(enum.Enum):
    """Kubernetes event types."""

    NORMAL = "Normal"
    WARNING = "Warning"


class UpdateMethod(enum.Enum):
    """How the host changes a child that exists but differs from what the plugin wants. A
    missing child is always created and an unwanted one always deleted, whatever the method."""

    IN_PLACE = "InPlace"
    """Apply the change to the existing child (server-side apply). The default."""
    ON_DELETE = "OnDelete"
    """Never change an existing child; the desired state applies once someone deletes it."""
    RECREATE = "Recreate"
    """Delete the child and create it anew on the next reconcile (for immutable fields)."""
    ROLLING_IN_PLACE = "RollingInPlace"
    """Like IN_PLACE, one child of the kind at a time: the next is changed only once every
    up-to-date child of the kind passes the status checks."""
    ROLLING_RECREATE = "RollingRecreate"
    """Like RECREATE, one child of the kind at a time, with the same rule."""


class Comparison(enum.Enum):
    """How a field compares with its operand (see :meth:`Check.field`)."""

    EQUAL = "Equal"
    """Equal as JSON values (numbers by value); a missing field is null."""
    NOT_EQUAL = "NotEqual"
    """Not equal as JSON values."""
    AT_LEAST = "AtLeast"
    """Both are numbers and the field is greater than or equal."""
    AT_MOST = "AtMost"
    """Both are numbers and the field is less than or equal."""


@dataclass(frozen=True)
class Operand:
    """What a field is compared with: a JSON value, ``Operand.value(3)``, or another field of
    the same object, ``Operand.field("spec.replicas")``."""

    path: Optional[str] = None
    """The other field's dotted path, or None for a value."""
    json: JSON = None
    """The JSON value (a dict, list, str, int, float, bool or None), when ``path`` is None."""

    @staticmethod
    def value(json: JSON) -> Operand:
        """A JSON value, e.g. ``"Running"``, ``3``, ``True``."""
        return Operand(None, json)

    @staticmethod
    def field(path: str) -> Operand:
        """Another field of the same object, as a dotted path (e.g. ``spec.replicas``)."""
        if not isinstance(path, str):
            raise TypeError(f"a field operand is a dotted path, not {path!r}")
        return Operand(path)


class Check:
    """One readiness check on an observed child: make one with :meth:`condition`,
    :meth:`field` or :meth:`equals`. Besides its checks, a child is ready only once it is not
    being deleted and, where it reports ``status.observedGeneration``, that has caught up with
    ``metadata.generation``."""

    @staticmethod
    def condition(type: str, status: ConditionStatus) -> ConditionCheck:
        """``status.conditions[]`` has an entry of this type with this status, e.g.
        ``Check.condition("Available", ConditionStatus.TRUE)``."""
        return ConditionCheck(type, status)

    @staticmethod
    def field(path: str, comparison: Comparison, operand: Operand) -> FieldCheck:
        """A field (dotted path from the object's root; a numeric segment indexes an array)
        compared with an operand, e.g. ``Check.field("status.readyReplicas",
        Comparison.AT_LEAST, Operand.field("spec.replicas"))``."""
        return FieldCheck(path, comparison, operand)

    @staticmethod
    def equals(path: str, value: JSON) -> FieldCheck:
        """The field equals a JSON value, e.g. ``Check.equals("status.phase", "Running")``."""
        return FieldCheck(path, Comparison.EQUAL, Operand.value(value))


@dataclass(frozen=True)
class ConditionCheck(Check):
    """A condition the observed child must carry (see :meth:`Check.condition`)."""

    type: str
    status: ConditionStatus

    def __post_init__(self) -> None:
        _expect(self.status, ConditionStatus, "a condition check's status")


@dataclass(frozen=True)
class FieldCheck(Check):
    """A field of the observed child compared with an operand (see :meth:`Check.field`)."""

    path: str
    comparison: Comparison
    operand: Operand

    def __post_init__(self) -> None:
        _expect(self.comparison, Comparison, "a field check's comparison")
        _expect(self.operand, Operand, "a field check's operand")


@dataclass
class UpdateStrategy:
    """How the existing children of one kind are changed:
    ``UpdateStrategy(UpdateMethod.ROLLING_IN_PLACE).status_check(Check.condition("Available",
    ConditionStatus.TRUE))``."""

    method: UpdateMethod = UpdateMethod.IN_PLACE
    status_checks: list[Check] = field(default_factory=list)
    """For the rolling methods: what makes an up-to-date child ready. Ignored by the others."""

    def __post_init__(self) -> None:
        _expect(self.method, UpdateMethod, "an update strategy's method")
        for check in self.status_checks:
            _expect(check, Check, "a status check")

    def status_check(self, check: Check) -> UpdateStrategy:
        """Adds a status check (for the rolling methods)."""
        _expect(check, Check, "a status check")
        self.status_checks.append(check)
        return self


@dataclass
class ChildKind:
    """A child kind the plugin creates, with how its existing children are changed."""

    kind: Kind
    strategy: UpdateStrategy = field(default_factory=UpdateStrategy)


def _expect(value: Any, expected: type, what: str) -> None:
    if not isinstance(value, expected):
        raise TypeError(f"{what} is a {expected.__name__}, not {value!r}")


@dataclass
class Info:
    """What a plugin declares about itself. The host reads it once, when it loads the plugin,
    and enforces it on every call. Give everything to the constructor, or chain the methods
    (as the Rust SDK's ``Info`` does)::

        INFO = (
            Info("webapp", Kind("examples.reconhost.dev/v1alpha1", "WebApp"))
            .child(Kind("v1", "Service"))
            .child_with(Kind("apps/v1", "Deployment"),
                        UpdateStrategy(UpdateMethod.ROLLING_IN_PLACE)
                        .status_check(Check.condition("Available", ConditionStatus.TRUE)))
            .ignore_status_changes()
        )
    """

    name: str
    """Short name, a DNS label; the host's field manager for children is ``reconhost/<name>``."""
    parent: Kind
    """The kind this plugin reconciles."""
    children: list[ChildKind] = field(default_factory=list)
    """The kinds of children it creates, each with its update strategy; any other kind is
    refused. A plain :class:`Kind` given here is taken with the default strategy (in place)."""
    reads: list[Kind] = field(default_factory=list)
    """The kinds it reads with :func:`reconhost.host.get` and :func:`reconhost.host.list`."""
    version: str = "0.1.0"
    """The plugin's own version (shown in the ReconcilePlugin's status)."""
    finalizer: bool = False
    """Whether the host keeps a finalizer on parents, so the plugin sees a deleted parent once
    more with :attr:`Request.finalizing` set and answers :meth:`Response.finalized`."""
    ignores_status_changes: bool = False
    """Whether a change to the parent that touches only its ``status`` should not call the
    plugin again (for plugins whose answer does not depend on the parent's status); set it
    with :meth:`ignore_status_changes`."""

    def __post_init__(self) -> None:
        self.children = [_child_kind(c) for c in self.children]

    def child(self, kind: Kind) -> Info:
        """Declares a child kind, changed in place (the default update strategy)."""
        self.children.append(ChildKind(kind))
        return self

    def child_with(self, kind: Kind, strategy: UpdateStrategy) -> Info:
        """Declares a child kind with how its existing children are changed."""
        self.children.append(ChildKind(kind, strategy))
        return self

    def ignore_status_changes(self) -> Info:
        """Asks not to be called again for a change that touches only the parent's status."""
        self.ignores_status_changes = True
        return self


def _child_kind(child: Any) -> ChildKind:
    if isinstance(child, ChildKind):
        return child
    if isinstance(child, Kind):
        return ChildKind(child)
    raise TypeError(f"a child kind is a Kind or a ChildKind, not {child!r}")


class PluginError(Exception):
    """Why a reconcile failed: the message ends up in a Warning event and a condition on the
    parent. Raise one of the two subclasses."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransientError(PluginError):
    """Something that may work later (a dependency is not ready): retried with backoff."""


class PermanentError(PluginError):
    """Something that will not work until the parent changes (an invalid spec): not retried
    until the parent's generation changes."""


@dataclass
class Request:
    """Everything the host observed about one parent."""

    parent: dict[str, JSON]
    """The parent object, as the API server serves it (without managedFields)."""
    children: list[dict[str, JSON]] = field(default_factory=list)
    """The observed children: objects of the declared child kinds controlled by the parent."""
    config: dict[str, JSON] = field(default_factory=dict)
    """The plugin's configuration from its ReconcilePlugin, ``{}`` if none."""
    finalizing: bool = False
    """The parent is being deleted: clean up and answer :meth:`Response.finalized`."""

    @property
    def metadata(self) -> dict[str, JSON]:
        """The parent's ``metadata``."""
        meta = self.parent.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def name(self) -> str:
        """The parent's name."""
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        """The parent's namespace (empty for a cluster-scoped parent)."""
        return str(self.metadata.get("namespace", ""))

    @property
    def generation(self) -> int:
        """The parent's ``metadata.generation``."""
        generation = self.metadata.get("generation", 0)
        return generation if isinstance(generation, int) else 0

    def spec(self) -> dict[str, JSON]:
        """The parent's ``spec`` (``{}`` if it has none). A spec that is not an object is a
        :class:`PermanentError`, since retrying cannot fix it."""
        spec = self.parent.get("spec", {})
        if spec is None:
            return {}
        if not isinstance(spec, dict):
            raise PermanentError("invalid spec: spec must be an object")
        return spec

    def child(self, api_version: str, kind: str, name: str) -> Optional[dict[str, JSON]]:
        """The observed child of this kind and name, if any."""
        for child in self.children:
            meta = child.get("metadata") or {}
            if (
                child.get("apiVersion") == api_version
                and child.get("kind") == kind
                and meta.get("name") == name
            ):
                return child
        return None


@dataclass
class Condition:
    """A condition on the parent (``status.conditions``), merged by type. The host sets
    ``lastTransitionTime`` and ``observedGeneration``."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass
class Event:
    """An Event about the parent."""

    type: EventType
    reason: str
    message: str


@dataclass
class Child:
    """One desired child, with its wave and what makes it ready (see
    :meth:`Response.child_in_wave`)."""

    object: JSON
    """The child: a partial object for server-side apply, with ``apiVersion``, ``kind`` (a
    declared child kind) and ``metadata.name``."""
    wave: int = 0
    """The host creates or changes children of wave n+1 only once every child of waves up to
    n exists as desired and is ready. 0 for children with no order."""
    ready_when: list[Check] = field(default_factory=list)
    """What makes this child ready, for the waves after its own (besides the checks every
    child gets, see :class:`Check`)."""


@dataclass
class ParentMetadata:
    """Labels and annotations the plugin sets on the parent (for a decorator, the object it
    decorates), applied under the plugin's own field manager: only these keys are the
    plugin's; a key it stops setting is removed, and nothing else of the parent changes. Keys
    under ``reconhost.dev/`` are the host's and refused."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


_U32 = 1 << 32
_U64 = 1 << 64


@dataclass
class Response:
    """The desired state of one parent. Build it with the chained methods."""

    children: list[Child] = field(default_factory=list)
    """Desired children; an observed child missing from this list is deleted."""
    status: Optional[dict[str, JSON]] = None
    """Desired ``status`` of the parent, or None to leave it unchanged."""
    conditions: list[Condition] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_ms: Optional[int] = None
    """Reconcile again after this many milliseconds even if nothing changes (set it with
    :meth:`requeue_after_ms`)."""
    is_finalized: bool = False
    """Cleanup is done; the host may remove its finalizer."""
    parent_metadata: Optional[ParentMetadata] = None
    """Labels and annotations to set on the parent, or None to set none (any the plugin set
    before are removed then); see :meth:`parent_label`."""

    def child(self, child: JSON) -> Response:
        """Adds a desired child (a dict with apiVersion, kind and metadata.name) in wave 0."""
        self.children.append(Child(child))
        return self

    def child_in_wave(self, wave: int, child: JSON, ready_when: Iterable[Check] = ()) -> Response:
        """Adds a desired child in ``wave``: the host creates or changes it only once every
        child of the earlier waves exists as desired and is ready. ``ready_when`` is what makes
        this child ready, for the waves after its own."""
        if not isinstance(wave, int) or isinstance(wave, bool) or not 0 <= wave < _U32:
            raise ValueError(f"a wave is an integer from 0 to 2^32-1, not {wave!r}")
        checks = list(ready_when)
        for check in checks:
            _expect(check, Check, "a ready check")
        self.children.append(Child(child, wave, checks))
        return self

    def with_status(self, status: dict[str, JSON]) -> Response:
        """Sets the desired status (the host adds observedGeneration and conditions)."""
        self.status = status
        return self

    def condition(self, type: str, status: ConditionStatus, reason: str, message: str) -> Response:
        """Adds a condition, e.g. ``condition("Degraded", ConditionStatus.UNKNOWN, "NoData",
        "no metrics yet")``."""
        _expect(status, ConditionStatus, "a condition's status")
        self.conditions.append(Condition(type, status, reason, message))
        return self

    def ready(self, ready: bool, reason: str, message: str) -> Response:
        """Adds the ``Ready`` condition, True or False."""
        return self.condition("Ready", ConditionStatus.TRUE if ready else ConditionStatus.FALSE, reason, message)

    def event(self, reason: str, message: str) -> Response:
        """Adds a Normal event."""
        self.events.append(Event(EventType.NORMAL, reason, message))
        return self

    def warning(self, reason: str, message: str) -> Response:
        """Adds a Warning event."""
        self.events.append(Event(EventType.WARNING, reason, message))
        return self

    def requeue_after_ms(self, ms: int) -> Response:
        """Asks to be called again after ``ms`` milliseconds, even if nothing changes."""
        if not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms < _U64:
            raise ValueError(f"requeue_after_ms takes whole milliseconds (an int >= 0), not {ms!r}")
        self.requeue_ms = ms
        return self

    def finalized(self) -> Response:
        """Reports that cleanup is done (the answer to :attr:`Request.finalizing`)."""
        self.is_finalized = True
        return self

    def parent_label(self, key: str, value: str) -> Response:
        """Sets a label on the parent (see :class:`ParentMetadata`). Keys under
        ``reconhost.dev/`` are refused by the host."""
        if self.parent_metadata is None:
            self.parent_metadata = ParentMetadata()
        self.parent_metadata.labels[key] = value
        return self

    def parent_annotation(self, key: str, value: str) -> Response:
        """Sets an annotation on the parent (see :class:`ParentMetadata`). Keys under
        ``reconhost.dev/`` are refused by the host."""
        if self.parent_metadata is None:
            self.parent_metadata = ParentMetadata()
        self.parent_metadata.annotations[key] = value
        return self
