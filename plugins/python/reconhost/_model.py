"""The plugin's view of one reconcile: what it declares, what it gets, what it answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

JSON = Any
"""A JSON value as :func:`json.loads` returns it."""


@dataclass(frozen=True)
class Kind:
    """A kind of Kubernetes object: ``apiVersion`` (``group/version``, or ``version`` for the core
    group) and ``kind``, e.g. ``Kind("apps/v1", "Deployment")``."""

    api_version: str
    kind: str


@dataclass
class Info:
    """What a plugin declares about itself. The host reads it once, when it loads the plugin,
    and enforces it on every call."""

    name: str
    """Short name, a DNS label; the host's field manager for children is ``reconhost/<name>``."""
    parent: Kind
    """The kind this plugin reconciles."""
    children: list[Kind] = field(default_factory=list)
    """The kinds of children it creates; any other kind is refused."""
    reads: list[Kind] = field(default_factory=list)
    """The kinds it reads with :func:`reconhost.host.get` and :func:`reconhost.host.list`."""
    version: str = "0.1.0"
    """The plugin's own version (shown in the ReconcilePlugin's status)."""
    finalizer: bool = False
    """Whether the host keeps a finalizer on parents, so the plugin sees a deleted parent once
    more with :attr:`Request.finalizing` set and answers :meth:`Response.finalized`."""


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
    status: Optional[bool]
    """True, False, or None for Unknown."""
    reason: str
    message: str


@dataclass
class Event:
    """An Event about the parent."""

    warning: bool
    reason: str
    message: str


@dataclass
class Response:
    """The desired state of one parent. Build it with the chained methods."""

    children: list[JSON] = field(default_factory=list)
    """Desired children: partial objects for server-side apply."""
    status: Optional[dict[str, JSON]] = None
    """Desired ``status`` of the parent, or None to leave it unchanged."""
    conditions: list[Condition] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after_ms: Optional[int] = None
    """Reconcile again after this many milliseconds even if nothing changes."""
    is_finalized: bool = False
    """Cleanup is done; the host may remove its finalizer."""

    def child(self, child: JSON) -> Response:
        """Adds a desired child (a dict with apiVersion, kind and metadata.name)."""
        self.children.append(child)
        return self

    def with_status(self, status: dict[str, JSON]) -> Response:
        """Sets the desired status (the host adds observedGeneration and conditions)."""
        self.status = status
        return self

    def condition(
        self, type: str, status: Optional[bool], reason: str, message: str
    ) -> Response:
        """Adds a condition: status True, False or None (Unknown)."""
        self.conditions.append(Condition(type, status, reason, message))
        return self

    def ready(self, ready: bool, reason: str, message: str) -> Response:
        """Adds the ``Ready`` condition."""
        return self.condition("Ready", ready, reason, message)

    def event(self, reason: str, message: str) -> Response:
        """Adds a Normal event."""
        self.events.append(Event(False, reason, message))
        return self

    def warning(self, reason: str, message: str) -> Response:
        """Adds a Warning event."""
        self.events.append(Event(True, reason, message))
        return self

    def requeue_after(self, seconds: float) -> Response:
        """Asks to be called again after this many seconds, even if nothing changes."""
        self.requeue_after_ms = max(0, int(seconds * 1000))
        return self

    def finalized(self) -> Response:
        """Reports that cleanup is done (the answer to :attr:`Request.finalizing`)."""
        self.is_finalized = True
        return self
