"""``py-misbehave``: a Python plugin that misbehaves on request, for the host's sandbox tests
(host/tests/all/languages/sandbox.rs). Never deploy it. ``spec.mode`` of the ``Widget`` picks:

- ``ok``: one ConfigMap and a Ready condition (the call after a failure must work)
- ``loop``: spins for ever; ``alloc``: allocates without bound, keeping everything
- ``raise``: an unexpected exception (a bug, which traps)
- ``invalid-json``: a child that is not JSON, through the raw bindings
- ``transient`` / ``permanent``: the SDK's errors
- ``read``: reads through the host as ``runtime-reads`` does (a ConfigMap by name, ConfigMaps by
  label, and a Secret it did not declare), and reports what it got
"""

import sys

from reconhost import Info, Kind, PermanentError, Request, Response, TransientError, host, reconciler

INFO = Info(
    "py-misbehave",
    Kind("test.reconhost.dev/v1", "Widget"),
    children=[Kind("v1", "ConfigMap")],
    reads=[Kind("v1", "ConfigMap")],
)


@reconciler(INFO)
def reconcile(request: Request) -> Response:
    mode = request.spec().get("mode", "ok")
    if mode == "loop":
        n = 0
        while True:
            n += 1
    if mode == "alloc":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
    if mode == "raise":
        raise RuntimeError(f"misbehave gave up on {request.name}")
    if mode == "transient":
        raise TransientError("asked to fail")
    if mode == "permanent":
        raise PermanentError("asked to fail")
    if mode == "read":
        config_map = Kind("v1", "ConfigMap")
        got = host.get(config_map, request.namespace, "settings")
        listed = host.list(config_map, request.namespace, "tier=web")
        try:
            host.get(Kind("v1", "Secret"), request.namespace, "token")
            denied = "nothing"
        except host.ReadError as e:
            denied = f"{e.reason}: {e.message}"
        host.info(f"read {len(listed)}")
        return Response().with_status({
            "got": None if got is None else got.get("data"),
            "listed": [o["metadata"]["name"] for o in listed],
            "denied": denied,
        })
    return (
        Response()
        .child({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": request.name}, "data": {"mode": "ok"}})
        .with_status({"mode": "ok"})
        .ready(True, "Fine", "fine")
    )


if "wit_world" in sys.modules:
    # invalid-json bypasses the SDK's serializer: the generated export answers with a child
    # that is not JSON, as a plugin written against the raw bindings could.
    from wit_world.imports import types  # type: ignore[import-not-found]

    _sdk_world = WitWorld  # type: ignore[name-defined]  # noqa: F821 (defined by @reconciler)

    class WitWorld(_sdk_world):  # type: ignore[no-redef]
        def reconcile(self, request: types.Request) -> types.Response:
            if '"mode":"invalid-json"' in request.parent.replace(" ", ""):
                return types.Response([types.DesiredChild("{not json", 0, [])], None, [], [], None, False, None)
            return super().reconcile(request)
