"""The SDK natively: requests, the declarations, the response builder, errors and the host
stand-in. Their conversion to the contract's types is in test_wire.py."""

import pytest

from reconhost import (
    Check,
    Child,
    ChildKind,
    Comparison,
    ConditionCheck,
    ConditionStatus,
    EventType,
    FieldCheck,
    Info,
    Kind,
    Operand,
    ParentMetadata,
    PermanentError,
    Request,
    Response,
    TransientError,
    UpdateMethod,
    UpdateStrategy,
    host,
    reconciler,
)


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
        .child_in_wave(2, {"kind": "B"}, [Check.condition("Ready", ConditionStatus.TRUE)])
        .with_status({"phase": "x"})
        .ready(False, "Waiting", "not yet")
        .condition("Degraded", ConditionStatus.UNKNOWN, "NoData", "no data")
        .event("Created", "made A")
        .warning("Slow", "B is slow")
        .requeue_after_ms(1500)
        .finalized()
    )
    assert response.children == [
        Child({"kind": "A"}),
        Child({"kind": "B"}, 2, [ConditionCheck("Ready", ConditionStatus.TRUE)]),
    ]
    assert response.children[0].wave == 0 and response.children[0].ready_when == []
    assert response.status == {"phase": "x"}
    assert [(c.type, c.status) for c in response.conditions] == [
        ("Ready", ConditionStatus.FALSE),
        ("Degraded", ConditionStatus.UNKNOWN),
    ]
    assert [(e.type, e.reason) for e in response.events] == [(EventType.NORMAL, "Created"), (EventType.WARNING, "Slow")]
    assert response.requeue_ms == 1500
    assert response.is_finalized
    assert response.parent_metadata is None


def test_an_empty_response_should_leave_everything_unset():
    response = Response()
    assert (response.children, response.status, response.conditions, response.events) == ([], None, [], [])
    assert (response.requeue_ms, response.is_finalized, response.parent_metadata) == (None, False, None)


def test_ready_should_be_a_true_or_false_ready_condition():
    assert Response().ready(True, "R", "m").conditions[0].status is ConditionStatus.TRUE
    assert Response().ready(False, "R", "m").conditions[0].status is ConditionStatus.FALSE
    assert ConditionStatus.TRUE.value == "True" and EventType.WARNING.value == "Warning"


def test_a_condition_should_take_a_condition_status_not_a_bool():
    with pytest.raises(TypeError, match="ConditionStatus"):
        Response().condition("Ready", True, "R", "m")
    with pytest.raises(TypeError, match="ConditionStatus"):
        Response().condition("Ready", None, "R", "m")
    with pytest.raises(TypeError, match="ConditionStatus"):
        Check.condition("Available", "True")


@pytest.mark.parametrize("ms", [1.5, -1, True, "100", 1 << 64])
def test_requeue_should_take_whole_milliseconds(ms):
    with pytest.raises(ValueError, match="whole milliseconds"):
        Response().requeue_after_ms(ms)


def test_requeue_should_keep_milliseconds_as_given():
    assert Response().requeue_after_ms(0).requeue_ms == 0
    assert Response().requeue_after_ms(30_000).requeue_ms == 30_000


@pytest.mark.parametrize("wave", [-1, 1 << 32, 1.0, False])
def test_a_wave_should_be_a_u32(wave):
    with pytest.raises(ValueError, match="wave"):
        Response().child_in_wave(wave, {})


def test_ready_when_should_take_checks_only():
    with pytest.raises(TypeError, match="ready check"):
        Response().child_in_wave(1, {}, [("Ready", "True")])
    checks = (c for c in [Check.equals("a", 1)])
    assert Response().child_in_wave(1, {}, checks).children[0].ready_when == [Check.equals("a", 1)]


def test_parent_labels_and_annotations_should_collect_by_key():
    response = (
        Response()
        .parent_label("b", "1")
        .parent_label("a", "2")
        .parent_annotation("note", "x")
        .parent_label("b", "3")
    )
    assert response.parent_metadata == ParentMetadata({"b": "3", "a": "2"}, {"note": "x"})
    assert Response().parent_annotation("k", "v").parent_metadata == ParentMetadata({}, {"k": "v"})


def test_checks_should_build_condition_and_field_checks():
    assert Check.condition("Available", ConditionStatus.FALSE) == ConditionCheck("Available", ConditionStatus.FALSE)
    assert Check.equals("status.phase", "Running") == FieldCheck("status.phase", Comparison.EQUAL, Operand.value("Running"))
    scaled = Check.field("status.readyReplicas", Comparison.AT_LEAST, Operand.field("spec.replicas"))
    assert (scaled.path, scaled.comparison, scaled.operand) == ("status.readyReplicas", Comparison.AT_LEAST, Operand("spec.replicas"))
    assert Operand.value(None) == Operand(None, None) and Operand.value(None) != Operand.field("x")
    assert isinstance(scaled, Check) and isinstance(Check.condition("A", ConditionStatus.TRUE), Check)
    with pytest.raises(TypeError, match="Comparison"):
        Check.field("a", "at-least", Operand.value(1))
    with pytest.raises(TypeError, match="Operand"):
        Check.field("a", Comparison.AT_LEAST, 1)


def test_info_should_declare_children_with_strategies_by_constructor_or_builder():
    deployment, service = Kind("apps/v1", "Deployment"), Kind("v1", "Service")
    rolling = UpdateStrategy(UpdateMethod.ROLLING_IN_PLACE).status_check(
        Check.condition("Available", ConditionStatus.TRUE)
    )
    built = (
        Info("shop", Kind("example.com/v1", "Shop"))
        .child(service)
        .child_with(deployment, rolling)
        .ignore_status_changes()
    )
    given = Info("shop", Kind("example.com/v1", "Shop"), children=[service, ChildKind(deployment, rolling)],
                 ignores_status_changes=True)
    assert built == given
    assert built.children == [ChildKind(service, UpdateStrategy()), ChildKind(deployment, rolling)]
    assert built.children[0].strategy.method is UpdateMethod.IN_PLACE
    assert rolling.status_checks == [ConditionCheck("Available", ConditionStatus.TRUE)]
    defaults = Info("shop", Kind("example.com/v1", "Shop"))
    assert (defaults.version, defaults.finalizer, defaults.ignores_status_changes) == ("0.1.0", False, False)
    with pytest.raises(TypeError, match="Kind or a ChildKind"):
        Info("shop", Kind("example.com/v1", "Shop"), children=[("v1", "Service")])
    with pytest.raises(TypeError, match="UpdateMethod"):
        UpdateStrategy("RollingInPlace")


def test_a_default_strategy_should_not_be_shared():
    a, b = UpdateStrategy(), UpdateStrategy()
    a.status_check(Check.equals("a", 1))
    assert b.status_checks == []


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
