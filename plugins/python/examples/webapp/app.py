"""``webapp`` in Python: a ``WebApp`` (examples.reconhost.dev/v1alpha1) becomes a Deployment and a
Service, exactly as the Rust example (plugins/examples/webapp) makes them.

The Deployment runs one container named ``app`` with the image and port of the spec; the Service
maps port 80 to it. Status reports the Deployment's ready replicas and a ``Ready`` condition that
is True once they reach ``spec.replicas``.
"""

from reconhost import Info, Kind, PermanentError, Request, Response, reconciler

INFO = Info(
    "webapp",
    Kind("examples.reconhost.dev/v1alpha1", "WebApp"),
    children=[Kind("apps/v1", "Deployment"), Kind("v1", "Service")],
    version="0.1.0",
)

FIELDS = ("image", "replicas", "port")


def _integer(spec: dict, field: str, default: int) -> int:
    value = spec.get(field, default)
    # bool is an int in Python, not in JSON.
    if not isinstance(value, int) or isinstance(value, bool):
        raise PermanentError(f"invalid spec: spec.{field} must be an integer")
    return value


@reconciler(INFO)
def reconcile(request: Request) -> Response:
    spec = request.spec()
    for key in spec:
        if key not in FIELDS:
            expected = ", ".join(f"`{f}`" for f in FIELDS)
            raise PermanentError(f"invalid spec: unknown field `{key}`, expected one of {expected}")
    image = spec.get("image", "")
    if not isinstance(image, str):
        raise PermanentError("invalid spec: spec.image must be a string")
    replicas = _integer(spec, "replicas", 1)
    port = _integer(spec, "port", 8080)
    if not image.strip():
        raise PermanentError("spec.image must not be empty")
    if not 1 <= port <= 65535:
        raise PermanentError(f"spec.port must be between 1 and 65535, not {port}")
    if replicas < 0:
        raise PermanentError(f"spec.replicas must not be negative, not {replicas}")

    name = request.name
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "reconhost"}
    selector = {"app.kubernetes.io/name": name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "app", "image": image, "ports": [{"containerPort": port, "name": "http"}]}
                    ]
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": 80, "targetPort": port}]},
    }

    observed = request.child("apps/v1", "Deployment", name) or {}
    ready_replicas = (observed.get("status") or {}).get("readyReplicas", 0)
    if not isinstance(ready_replicas, int) or isinstance(ready_replicas, bool):
        ready_replicas = 0
    ready = ready_replicas >= replicas
    return (
        Response()
        .child(deployment)
        .child(service)
        .with_status({"readyReplicas": ready_replicas})
        .ready(
            ready,
            "ReplicasReady" if ready else "ReplicasNotReady",
            f"{ready_replicas} of {replicas} replicas ready",
        )
    )
