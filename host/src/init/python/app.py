"""``{{name}}``: a ``{{kind}}`` ({{group}}/{{version}}) becomes a ConfigMap named after it, holding
``spec.message``."""

from reconhost import Info, Kind, PermanentError, Request, Response, reconciler

INFO = Info(
    "{{name}}",
    Kind("{{group}}/{{version}}", "{{kind}}"),
    children=[Kind("v1", "ConfigMap")],
    version="0.1.0",
)


@reconciler(INFO)
def reconcile(request: Request) -> Response:
    message = request.spec().get("message", "")
    if not isinstance(message, str) or not message:
        raise PermanentError("spec.message must not be empty")
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": request.name},
        "data": {"message": message},
    }
    return (
        Response()
        .child(config_map)
        .with_status({"message": message})
        .ready(True, "ConfigMapWritten", "the ConfigMap holds the message")
    )
