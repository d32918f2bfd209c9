"""Write reconhost reconcile plugins in Python.

A plugin reconciles one custom resource kind (the *parent*). The host watches, caches, queues,
retries and applies; the plugin answers one question: given the parent and the children the host
observed, what should exist? Decorate a function from :class:`Request` to :class:`Response` with
:func:`reconciler` and build the module with componentize-py::

    from reconhost import Info, Kind, PermanentError, Request, Response, reconciler

    INFO = Info("greeter", Kind("examples.reconhost.dev/v1alpha1", "Greeting"),
                children=[Kind("v1", "ConfigMap")])

    @reconciler(INFO)
    def reconcile(request: Request) -> Response:
        who = request.spec().get("who")
        if not who:
            raise PermanentError("spec.who is required")
        return Response().child({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": request.name},
            "data": {"greeting": f"hello, {who}"},
        }).ready(True, "Greeted", "the greeting exists")

Contract 0.2 adds, each optional:

- an update strategy per child kind: ``Info(...).child_with(Kind("apps/v1", "Deployment"),
  UpdateStrategy(UpdateMethod.ROLLING_IN_PLACE).status_check(Check.condition("Available",
  ConditionStatus.TRUE)))``;
- ordered waves of children with readiness checks: ``Response().child_in_wave(1, obj,
  [Check.equals("status.phase", "Bound")])``;
- labels and annotations on the parent: ``Response().parent_label(key, value)``,
  ``parent_annotation(key, value)``;
- ``Info(...).ignore_status_changes()``: no call for a change to the parent's status alone.

What the host guarantees and enforces (the WIT contract ``reconhost:plugin@0.2.0``; the host
also keeps running plugins built against 0.1.0):

- Every call runs in a fresh instance: module globals start over each time.
- Children land in the parent's namespace with the parent as controller ownerReference; do not
  set ``metadata.namespace`` to anything else or ``metadata.ownerReferences`` at all.
- An observed child missing from the response is deleted. Return every child every time.
- Children are partial objects for server-side apply: set only the fields you own.
- Calls run under a deadline and a memory cap; logs and output are capped per call.
- An exception other than :class:`TransientError` and :class:`PermanentError` is a bug: the call
  traps, and its traceback reaches the host's error (as a Rust panic does).
"""

from ._model import (
    Check,
    Child,
    ChildKind,
    Comparison,
    Condition,
    ConditionCheck,
    ConditionStatus,
    Event,
    EventType,
    FieldCheck,
    Info,
    Kind,
    Operand,
    ParentMetadata,
    PermanentError,
    PluginError,
    Request,
    Response,
    TransientError,
    UpdateMethod,
    UpdateStrategy,
)
from ._export import reconciler

__all__ = [
    "Check",
    "Child",
    "ChildKind",
    "Comparison",
    "Condition",
    "ConditionCheck",
    "ConditionStatus",
    "Event",
    "EventType",
    "FieldCheck",
    "Info",
    "Kind",
    "Operand",
    "ParentMetadata",
    "PermanentError",
    "PluginError",
    "Request",
    "Response",
    "TransientError",
    "UpdateMethod",
    "UpdateStrategy",
    "reconciler",
]
