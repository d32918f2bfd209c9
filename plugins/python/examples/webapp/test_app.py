"""webapp natively, on the Rust example's fixtures (plugins/examples/webapp/fixtures): the same
children, status, condition and errors as the Rust plugin's unit tests and the conformance test
(host/tests/all/languages/conformance.rs) require of the component."""

import copy
import pathlib

import pytest
import yaml

from app import INFO, reconcile
from reconhost import ConditionStatus, PermanentError, Request, UpdateMethod

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "examples" / "webapp" / "fixtures"


def load(name):
    with open(FIXTURES / name) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_info_should_match_the_rust_plugin():
    assert INFO.name == "webapp"
    assert (INFO.parent.api_version, INFO.parent.kind) == ("examples.reconhost.dev/v1alpha1", "WebApp")
    assert [(c.kind.api_version, c.kind.kind) for c in INFO.children] == [("apps/v1", "Deployment"), ("v1", "Service")]
    assert [c.strategy.method for c in INFO.children] == [UpdateMethod.IN_PLACE] * 2
    assert not INFO.finalizer and not INFO.ignores_status_changes


def test_a_webapp_should_become_a_deployment_and_a_service():
    parent = load("parent.yaml")[0]
    response = reconcile(Request(parent))
    deployment, service = (c.object for c in response.children)
    assert [(c.wave, c.ready_when) for c in response.children] == [(0, [])] * 2
    assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container == {"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8080, "name": "http"}]}
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8080}]
    assert service["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "reconhost"
    assert response.status == {"readyReplicas": 0}
    assert response.conditions[0].status is ConditionStatus.FALSE


def test_ready_replicas_should_come_from_the_observed_deployment():
    parent = load("parent.yaml")[0]
    observed = load("observed.yaml")
    response = reconcile(Request(parent, observed))
    assert response.status == {"readyReplicas": 1}
    assert response.conditions[0].message == "1 of 2 replicas ready"
    ready = copy.deepcopy(observed)
    ready[0]["status"]["readyReplicas"] = 2
    condition = reconcile(Request(parent, ready)).conditions[0]
    assert (condition.status, condition.reason) == (ConditionStatus.TRUE, "ReplicasReady")


def test_defaults_should_be_one_replica_on_port_8080():
    response = reconcile(Request({"metadata": {"name": "a"}, "spec": {"image": "x"}}))
    assert response.children[0].object["spec"]["replicas"] == 1
    assert response.children[1].object["spec"]["ports"][0]["targetPort"] == 8080


@pytest.mark.parametrize("parent", load("invalid-specs.yaml") + load("invalid.yaml"), ids=lambda p: p["metadata"]["name"])
def test_every_invalid_spec_should_be_a_permanent_error_with_the_rust_message(parent):
    expected = parent["metadata"].get("annotations", {}).get("expect", "spec.image must not be empty")
    with pytest.raises(PermanentError) as err:
        reconcile(Request(parent))
    assert err.value.message == expected


def test_a_value_of_the_wrong_type_should_name_the_field():
    with pytest.raises(PermanentError, match="spec.port must be an integer"):
        reconcile(Request({"metadata": {"name": "a"}, "spec": {"image": "x", "port": "80"}}))
