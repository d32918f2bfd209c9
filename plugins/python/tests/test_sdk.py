"""The SDK natively: requests, the response builder, errors and the host stand-in."""

import pytest

from reconhost import Info, Kind, PermanentError, Request, Response, TransientError, host, reconciler


def request(spec=None, children=()):
    parent = {"apiVersion": "example.com/v1", "kind": "Widget",
              "metadata": {"name": "w", "namespace": "team-a", "generation": 3}}
    if spec is not None:
        parent["spec"] = spec
    return Request(parent, list(children))


def test_request_should_expose_the_parents_identity():
    r = request({"a": 1})
    assert (r.name, r.namespace, r.generation) == ("w", "team-a", 3)
    assert r.spec() == {"a": 1}
    assert r.config == {} and r.finalizing is False


def test_a_missing_spec_should_read_as_empty_and_a_non_object_spec_should_be_permanent():
    assert request().spec() == {}
    with pytest.raises(PermanentError, match="spec must be an object"):
        request("text").spec()


def test_child_should_find_an_observed_child_by_kind_and_name():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}}
    r = request({}, [cm, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "w"}}])
    assert r.child("v1", "ConfigMap", "w") is cm
    assert r.child("v1", "ConfigMap", "other") is None


def test_the_builder_should_collect_everything_in_order():
    response = (
        Response()
        .child({"kind": "A"})
        .child({"kind": "B"})
        .with_status({"phase": "x"})
        .ready(False, "Waiting", "not yet")
        .condition("Degraded", None, "Unknown", "no data")
        .event("Created", "made A")
        .warning("Slow", "B is slow")
        .requeue_after(1.5)
        .finalized()
    )
    assert [c["kind"] for c in response.children] == ["A", "B"]
    assert response.status == {"phase": "x"}
    assert [(c.type, c.status) for c in response.conditions] == [("Ready", False), ("Degraded", None)]
    assert [(e.warning, e.reason) for e in response.events] == [(False, "Created"), (True, "Slow")]
    assert response.requeue_after_ms == 1500
    assert response.is_finalized


def test_errors_should_carry_their_message():
    assert TransientError("later").message == "later"
    assert str(PermanentError("never")) == "never"


def test_reconciler_should_leave_the_function_callable_natively():
    info = Info("w", Kind("example.com/v1", "Widget"))

    @reconciler(info)
    def reconcile(r):
        return Response().with_status({"name": r.name})

    assert reconcile(request({})).status == {"name": "w"}


def test_reads_should_go_to_an_installed_stand_in_and_fail_clearly_without_one():
    kind = Kind("v1", "ConfigMap")
    with pytest.raises(host.ReadError, match="no host outside a component"):
        host.get(kind, "team-a", "x")

    class Fake:
        def __init__(self):
            self.lines = []

        def log(self, level, message):
            self.lines.append((level, message))

        def get(self, kind, namespace, name):
            return {"metadata": {"name": name}} if name == "x" else None

        def list(self, kind, namespace, selector):
            return [{"metadata": {"name": "x"}}]

    fake = Fake()
    host.use(fake)
    try:
        assert host.get(kind, "team-a", "x") == {"metadata": {"name": "x"}}
        assert host.get(kind, "team-a", "y") is None
        assert len(host.list(kind, "team-a", "app=web")) == 1
        host.info("hello")
        assert fake.lines == [("info", "hello")]
        with pytest.raises(ValueError, match="not one of"):
            host.log("loud", "x")
    finally:
        host.use(None)
