"""The plugin's logic, natively: no component, no host."""

import pytest

from app import reconcile
from reconhost import ConditionStatus, PermanentError, Request


def parent(spec):
    return Request({"apiVersion": "{{group}}/{{version}}", "kind": "{{kind}}",
                    "metadata": {"name": "example", "namespace": "default", "generation": 1},
                    "spec": spec})


def test_a_message_should_become_a_config_map():
    response = reconcile(parent({"message": "hello"}))
    [child] = response.children
    config_map = child.object
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["name"] == "example"
    assert config_map["data"] == {"message": "hello"}
    assert response.conditions[0].status is ConditionStatus.TRUE


def test_an_empty_message_should_be_a_permanent_error():
    with pytest.raises(PermanentError, match="spec.message must not be empty"):
        reconcile(parent({"message": ""}))
