"""The SDK's types as the contract's: Wire against the very module componentize-py generates for
``types`` (test.sh writes the bindings and names their directory in $RECONHOST_WIT_BINDINGS).
The module is loaded by path, so ``wit_world`` stays unimportable and the SDK stays native."""

import importlib.util
import json
import os
import pathlib
import sys

import pytest

from reconhost import (
    Check,
    ChildKind,
    Comparison,
    ConditionStatus,
    EventType,
    Info,
    Kind,
    Operand,
    Response,
    UpdateMethod,
    UpdateStrategy,
)
from reconhost._wire import Wire

BINDINGS = os.environ.get("RECONHOST_WIT_BINDINGS")
pytestmark = pytest.mark.skipif(not BINDINGS, reason="run by test.sh, which generates the bindings")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def t():
    root = pathlib.Path(BINDINGS)
    if "componentize_py_types" not in sys.modules:
        _load("componentize_py_types", root / "componentize_py_types.py")
    return _load("reconhost_test_wit_types", root / "wit_world" / "imports" / "types.py")


@pytest.fixture
def wire(t):
    return Wire(t, json.JSONEncoder(separators=(",", ":")).encode)


def kind(t, api_version, kind):
    return t.KindRef(api_version, kind)


def test_the_sdk_enums_should_have_the_contracts_cases(t):
    for ours, theirs in [
        (ConditionStatus, t.ConditionStatus),
        (EventType, t.EventType),
        (UpdateMethod, t.UpdateMethod),
        (Comparison, t.Comparison),
    ]:
        assert [m.name for m in ours] == [m.name for m in theirs], ours.__name__


def test_info_should_carry_every_declaration_into_the_contract(t, wire):
    info = (
        Info("shop", Kind("example.com/v1", "Shop"), reads=[Kind("v1", "Secret")], version="1.2.3", finalizer=True)
        .child(Kind("v1", "ConfigMap"))
        .child_with(
            Kind("apps/v1", "Deployment"),
            UpdateStrategy(UpdateMethod.ROLLING_IN_PLACE)
            .status_check(Check.condition("Available", ConditionStatus.TRUE))
            .status_check(Check.field("status.readyReplicas", Comparison.AT_LEAST, Operand.field("spec.replicas"))),
        )
        .ignore_status_changes()
    )
    assert wire.info(info) == t.PluginInfo(
        "shop",
        "1.2.3",
        kind(t, "example.com/v1", "Shop"),
        [
            t.ChildKind(kind(t, "v1", "ConfigMap"), t.UpdateStrategy(t.UpdateMethod.IN_PLACE, [])),
            t.ChildKind(
                kind(t, "apps/v1", "Deployment"),
                t.UpdateStrategy(
                    t.UpdateMethod.ROLLING_IN_PLACE,
                    [
                        t.ReadyCheck_Condition(t.ConditionCheck("Available", t.ConditionStatus.TRUE)),
                        t.ReadyCheck_Field(
                            t.FieldCheck("status.readyReplicas", t.Comparison.AT_LEAST, t.Operand_Field("spec.replicas"))
                        ),
                    ],
                ),
            ),
        ],
        [kind(t, "v1", "Secret")],
        True,
        True,
    )


def test_info_should_default_to_no_finalizer_and_every_status_change(t, wire):
    info = wire.info(Info("shop", Kind("example.com/v1", "Shop")))
    assert (info.version, info.finalizer, info.ignore_status_changes) == ("0.1.0", False, False)
    assert info.children == [] and info.reads == []


def test_a_kind_put_in_children_after_construction_should_be_changed_in_place(t, wire):
    info = Info("shop", Kind("example.com/v1", "Shop"))
    info.children.append(Kind("v1", "ConfigMap"))
    assert wire.info(info).children == [
        t.ChildKind(kind(t, "v1", "ConfigMap"), t.UpdateStrategy(t.UpdateMethod.IN_PLACE, []))
    ]


@pytest.mark.parametrize("method", list(UpdateMethod))
def test_every_update_method_should_map_to_its_contract_case(t, wire, method):
    assert wire.strategy(UpdateStrategy(method)).method == t.UpdateMethod[method.name]


@pytest.mark.parametrize("comparison", list(Comparison))
def test_every_comparison_should_map_to_its_contract_case(t, wire, comparison):
    wired = wire.check(Check.field("a", comparison, Operand.value(1)))
    assert wired.value.comparison == t.Comparison[comparison.name]


def test_a_value_operand_should_cross_as_json_text(t, wire):
    def value(v):
        return wire.check(Check.equals("status.x", v)).value.operand

    assert value("Running") == t.Operand_Value('"Running"')
    assert value(True) == t.Operand_Value("true")
    assert value(3) == t.Operand_Value("3")
    assert value(None) == t.Operand_Value("null")
    assert value({"a": [1, None]}) == t.Operand_Value('{"a":[1,null]}')
    assert wire.check(Check.field("s", Comparison.AT_MOST, Operand.value(3))) == t.ReadyCheck_Field(
        t.FieldCheck("s", t.Comparison.AT_MOST, t.Operand_Value("3"))
    )


def test_a_field_operand_should_cross_as_its_path(t, wire):
    assert wire.check(Check.field("status.readyReplicas", Comparison.AT_LEAST, Operand.field("spec.replicas"))) == (
        t.ReadyCheck_Field(t.FieldCheck("status.readyReplicas", t.Comparison.AT_LEAST, t.Operand_Field("spec.replicas")))
    )


def test_a_condition_check_should_name_type_and_status(t, wire):
    for status in ConditionStatus:
        assert wire.check(Check.condition("Available", status)) == t.ReadyCheck_Condition(
            t.ConditionCheck("Available", t.ConditionStatus[status.name])
        )


def test_an_empty_response_should_leave_everything_unset(t, wire):
    assert wire.response(Response()) == t.Response([], None, [], [], None, False, None)


def test_a_response_should_reach_the_contract_in_order(t, wire):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    response = (
        Response()
        .child(cm)
        .child_in_wave(2, {"kind": "B"}, [Check.condition("Ready", ConditionStatus.TRUE), Check.equals("data.ok", "yes")])
        .child_in_wave(1, {"kind": "C"})
        .with_status({"phase": "x"})
        .ready(False, "Waiting", "not yet")
        .condition("Degraded", ConditionStatus.UNKNOWN, "NoData", "no data")
        .event("Created", "made A")
        .warning("Slow", "B is slow")
        .requeue_after_ms(1500)
        .finalized()
    )
    assert wire.response(response) == t.Response(
        [
            t.DesiredChild('{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}', 0, []),
            t.DesiredChild(
                '{"kind":"B"}',
                2,
                [
                    t.ReadyCheck_Condition(t.ConditionCheck("Ready", t.ConditionStatus.TRUE)),
                    t.ReadyCheck_Field(t.FieldCheck("data.ok", t.Comparison.EQUAL, t.Operand_Value('"yes"'))),
                ],
            ),
            t.DesiredChild('{"kind":"C"}', 1, []),
        ],
        '{"phase":"x"}',
        [
            t.Condition("Ready", t.ConditionStatus.FALSE, "Waiting", "not yet"),
            t.Condition("Degraded", t.ConditionStatus.UNKNOWN, "NoData", "no data"),
        ],
        [
            t.Event(t.EventType.NORMAL, "Created", "made A"),
            t.Event(t.EventType.WARNING, "Slow", "B is slow"),
        ],
        1500,
        True,
        None,
    )


def test_parent_metadata_should_cross_sorted_by_key(t, wire):
    response = Response().parent_label("b", "1").parent_label("a", "2").parent_annotation("z", "x")
    assert wire.response(response).parent_metadata == t.MetadataPatch([("a", "2"), ("b", "1")], [("z", "x")])
    assert wire.response(Response().parent_annotation("k", "v")).parent_metadata == t.MetadataPatch([], [("k", "v")])


def test_a_child_kind_should_keep_its_strategy(t, wire):
    strategy = UpdateStrategy(UpdateMethod.ON_DELETE)
    assert wire.child_kind(ChildKind(Kind("v1", "Pod"), strategy)) == t.ChildKind(
        kind(t, "v1", "Pod"), t.UpdateStrategy(t.UpdateMethod.ON_DELETE, [])
    )
