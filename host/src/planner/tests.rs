//! The planner's rules, each on its own, without a cluster.
use super::*;

fn info() -> PluginInfo {
    PluginInfo {
        name: "webapp".into(),
        version: "0.1.0".into(),
        parent: KindRef::new("examples.reconhost.dev/v1alpha1", "WebApp"),
        children: vec![KindRef::new("v1", "ConfigMap")],
        reads: vec![],
        finalizer: false,
        strategies: Default::default(),
        ignore_status_changes: false,
    }
}

fn parent() -> Value {
    json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
           "metadata": {"name": "web", "namespace": "a", "uid": "u-1", "generation": 3}})
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn observed(name: &str, data: Value) -> Value {
    let mut o = cm(name, data);
    o["metadata"] = json!({"name": name, "namespace": "a", "uid": format!("uid-{name}"), "resourceVersion": "7",
                           "ownerReferences": [owner_reference(&parent())]});
    o
}

/// What `validate` makes of these children of a parent in namespace `a`.
fn desired(children: Vec<Value>) -> Desired {
    let children = children
        .into_iter()
        .map(|body| crate::model::DesiredChild {
            kind: kind_of(&body),
            namespace: match namespace_of(&body) {
                "" => "a".to_owned(),
                ns => ns.to_owned(),
            },
            name: body["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            body,
            wave: 0,
            ready_when: Vec::new(),
        })
        .collect();
    Desired {
        children,
        ..Desired::default()
    }
}

#[test]
fn missing_child_should_be_created_with_namespace_and_owner() {
    let plan = plan(
        &info(),
        &StatusFields::all(),
        &parent(),
        &desired(vec![cm("x", json!({"k": "v"}))]),
        &[],
        "T0",
    );
    let child = &plan.children[0];
    assert_eq!(child.action, Action::Create);
    assert_eq!(child.object["metadata"]["namespace"], "a");
    let owner = &child.object["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["uid"].as_str(),
            owner["controller"].as_bool(),
            owner["kind"].as_str()
        ),
        (Some("u-1"), Some(true), Some("WebApp"))
    );
}

#[test]
fn child_matching_the_observed_should_be_unchanged_despite_server_fields() {
    let plan = plan(
        &info(),
        &StatusFields::all(),
        &parent(),
        &desired(vec![cm("x", json!({"k": "v"}))]),
        &[observed("x", json!({"k": "v"}))],
        "T0",
    );
    assert_eq!(plan.children[0].action, Action::Unchanged);
}

#[test]
fn changed_child_should_be_updated_and_undesired_child_deleted_with_its_uid() {
    let obs = [
        observed("x", json!({"k": "old"})),
        observed("gone", json!({})),
    ];
    let plan = plan(
        &info(),
        &StatusFields::all(),
        &parent(),
        &desired(vec![cm("x", json!({"k": "new"}))]),
        &obs,
        "T0",
    );
    assert_eq!(plan.children[0].action, Action::Update);
    assert_eq!(
        plan.children[0].changes.shown(),
        ["data.k"],
        "what the trace names"
    );
    assert_eq!(plan.children[1].action, Action::Delete);
    assert_eq!(plan.children[1].name, "gone");
    assert_eq!(plan.children[1].uid.as_deref(), Some("uid-gone"));
}

#[test]
fn child_that_lost_a_field_the_plugin_applied_should_be_updated() {
    let mut obs = observed("x", json!({"k": "v", "gone": "w"}));
    obs["metadata"]["managedFields"] = json!([{
        "manager": "reconhost/webapp", "operation": "Apply", "apiVersion": "v1",
        "fieldsV1": {"f:data": {".": {}, "f:k": {}, "f:gone": {}},
                     "f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u-1\"}": {}}}}
    }]);
    let now_desired = desired(vec![cm("x", json!({"k": "v"}))]);
    let plan_after_removal = plan(
        &info(),
        &StatusFields::all(),
        &parent(),
        &now_desired,
        &[obs.clone()],
        "T0",
    );
    assert_eq!(plan_after_removal.children[0].action, Action::Update);
    assert_eq!(
        plan_after_removal.children[0].changes.shown(),
        ["data.gone (removed)"]
    );
    let both = desired(vec![cm("x", json!({"k": "v", "gone": "w"}))]);
    let steady = plan(
        &info(),
        &StatusFields::all(),
        &parent(),
        &both,
        &[obs],
        "T0",
    );
    assert_eq!(steady.children[0].action, Action::Unchanged);
}

#[test]
fn steady_state_should_plan_nothing() {
    let mut d = desired(vec![cm("x", json!({"k": "v"}))]);
    d.conditions.push(Condition {
        type_: "Ready".into(),
        status: ConditionStatus::True,
        reason: "Ok".into(),
        message: "m".into(),
    });
    d.status = Some(json!({"readyReplicas": 1}));
    let first = plan(&info(), &StatusFields::all(), &parent(), &d, &[], "T0");
    let mut p = parent();
    p["status"] = first.status.clone().unwrap();
    let second = plan(
        &info(),
        &StatusFields::all(),
        &p,
        &d,
        &[observed("x", json!({"k": "v"}))],
        "T1",
    );
    assert!(second.is_noop(), "{second:?}");
}

#[test]
fn transition_time_should_move_only_when_the_condition_status_changes() {
    let cond = |s| Condition {
        type_: "Ready".into(),
        status: s,
        reason: "R".into(),
        message: "m".into(),
    };
    let mut d = desired(vec![]);
    d.conditions.push(cond(ConditionStatus::False));
    let mut p = parent();
    p["status"] = plan(&info(), &StatusFields::all(), &p, &d, &[], "T0")
        .status
        .unwrap();
    d.conditions[0].message = "other message".into();
    let same = plan(&info(), &StatusFields::all(), &p, &d, &[], "T1")
        .status
        .unwrap();
    assert_eq!(same["conditions"][0]["lastTransitionTime"], "T0");
    assert_eq!(same["conditions"][0]["message"], "other message");
    d.conditions[0] = cond(ConditionStatus::True);
    let flipped = plan(&info(), &StatusFields::all(), &p, &d, &[], "T2")
        .status
        .unwrap();
    assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "T2");
    assert_eq!(flipped["observedGeneration"], 3);
}

#[test]
fn a_cluster_scoped_parents_children_should_be_told_apart_by_namespace() {
    let parent = json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
                        "metadata": {"name": "web", "uid": "u-1", "generation": 1}});
    let quota = |ns: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "q", "namespace": ns}, "data": {"k": "v"}})
    };
    let seen = |ns: &str| {
        let mut o = quota(ns);
        o["metadata"]["uid"] = json!(format!("u-{ns}"));
        o["metadata"]["ownerReferences"] = json!([owner_reference(&parent)]);
        o
    };
    let p = plan(
        &info(),
        &StatusFields::all(),
        &parent,
        &desired(vec![quota("a"), quota("b")]),
        &[seen("b"), seen("c")],
        "T0",
    );
    let actions: Vec<_> = p
        .children
        .iter()
        .map(|c| (c.action, c.namespace.as_str()))
        .collect();
    assert_eq!(
        actions,
        vec![
            (Action::Create, "a"),
            (Action::Unchanged, "b"),
            (Action::Delete, "c")
        ]
    );
    assert_eq!(p.children[2].uid.as_deref(), Some("u-c"));
    assert_eq!(p.children[0].object["metadata"]["namespace"], "a");
}

#[test]
fn a_failure_over_a_planned_status_should_keep_the_earlier_transition() {
    let mut p = parent();
    p["status"] = failure_status(&p, "ApplyError", "first", &StatusFields::all(), "T0").unwrap();
    let mut d = desired(vec![]);
    d.status = Some(json!({"phase": "New"}));
    let planned = plan(&info(), &StatusFields::all(), &p, &d, &[], "T1")
        .status
        .unwrap();
    let failed = with_failure(
        &p,
        &planned,
        "ChildFailed",
        "ns gone",
        &StatusFields::all(),
        "T1",
    );
    assert_eq!(
        failed["phase"], "New",
        "the plugin's status is still written"
    );
    let synced = &failed["conditions"][0];
    assert_eq!(
        (&synced["status"], &synced["reason"]),
        (&json!("False"), &json!("ChildFailed"))
    );
    assert_eq!(synced["lastTransitionTime"], "T0", "still False since T0");
}

#[test]
fn a_kind_without_the_hosts_status_fields_should_still_get_the_plugins_status() {
    let none = StatusFields {
        observed_generation: false,
        conditions: None,
        schema: None,
        decorator: false,
    };
    let mut d = desired(vec![]);
    d.status = Some(json!({"phase": "Ready"}));
    let status = plan(&info(), &none, &parent(), &d, &[], "T0").status;
    assert_eq!(status, Some(json!({"phase": "Ready"})));
    let mut p = parent();
    p["status"] = json!({"phase": "Ready"});
    assert_eq!(
        plan(&info(), &none, &p, &d, &[], "T1").status,
        None,
        "steady"
    );
    assert_eq!(failure_status(&p, "ApplyError", "boom", &none, "T1"), None);
}

#[test]
fn the_plugins_undeclared_status_fields_should_be_dropped_and_named_without_churn() {
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object"},
        "status": {"type": "object", "properties": {
            "phase": {"type": "string"},
            "active": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
            "observedGeneration": {"type": "integer"},
        }},
    }});
    let fields = StatusFields::from_schema(&schema);
    let mut d = desired(vec![]);
    d.status = Some(json!({"phase": "Green",
                           "active": {"replicas": 2, "terminatingReplicas": 1}}));
    let first = plan(&info(), &fields, &parent(), &d, &[], "T0");
    assert_eq!(
        first.status,
        Some(json!({"phase": "Green", "active": {"replicas": 2}, "observedGeneration": 3}))
    );
    assert_eq!(first.dropped, ["status.active.terminatingReplicas"]);
    // The API server holds the pruned status: the same answer again writes nothing.
    let mut p = parent();
    p["status"] = first.status.unwrap();
    let again = plan(&info(), &fields, &p, &d, &[], "T1");
    assert_eq!(again.status, None, "steady");
    assert_eq!(again.dropped, ["status.active.terminatingReplicas"]);
}

fn decorator_info() -> PluginInfo {
    PluginInfo {
        name: "services".into(),
        finalizer: true,
        ..info()
    }
}

#[test]
fn a_decorator_on_a_built_in_kind_should_write_no_status_and_label_its_children() {
    let fields = StatusFields::all().for_decorator(false);
    let mut target = parent();
    target["status"] = json!({"readyReplicas": 1});
    let mut d = desired(vec![cm("web-0", json!({}))]);
    d.status = Some(json!({"decorated": true}));
    d.conditions = vec![synced(true, "Fine", "")];
    let plan = plan(&decorator_info(), &fields, &target, &d, &[], "T0");
    assert_eq!(
        plan.status, None,
        "nothing of the host's, nothing undeclared"
    );
    assert_eq!(
        plan.finalizer,
        Some(FinalizerAction::Add),
        "it attaches something"
    );
    assert_eq!(
        plan.children[0].object["metadata"]["labels"],
        json!({DECORATOR_LABEL: "services"})
    );
    assert_eq!(
        failure_status(&target, "ReconcileError", "boom", &fields, "T0"),
        None,
        "failures show as events only"
    );
}

#[test]
fn a_decorator_should_hold_its_finalizer_only_while_it_attaches_something() {
    let fields = StatusFields::all().for_decorator(false);
    let mut target = parent();
    target["metadata"]["finalizers"] = json!(["reconhost.dev/services"]);
    let nothing = desired(vec![]);
    let attached = observed("web-0", json!({}));
    assert_eq!(
        plan(&decorator_info(), &fields, &parent(), &nothing, &[], "T").finalizer,
        None,
        "an object it does not decorate gets no finalizer"
    );
    let still = plan(
        &decorator_info(),
        &fields,
        &target,
        &nothing,
        &[attached],
        "T",
    );
    assert_eq!(still.finalizer, None, "kept until what it attached is gone");
    assert_eq!(still.children[0].action, Action::Delete);
    assert_eq!(
        plan(&decorator_info(), &fields, &target, &nothing, &[], "T").finalizer,
        Some(FinalizerAction::Remove)
    );
}

#[test]
fn a_decorators_status_should_be_only_what_the_plugin_asks_for_and_the_crd_declares() {
    let schema = json!({"type": "object", "properties": {"status": {"type": "object",
        "properties": {"decorated": {"type": "boolean"}, "replicas": {"type": "integer"},
                       "conditions": {"type": "array", "items": {"type": "object",
                           "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}}}});
    let fields = StatusFields::from_schema(&schema).for_decorator(true);
    let mut target = parent();
    target["status"] = json!({"replicas": 3});
    let mut d = desired(vec![]);
    d.status = Some(json!({"decorated": true, "undeclared": 1}));
    d.conditions = vec![synced(true, "Fine", "")];
    let first = plan(&decorator_info(), &fields, &target, &d, &[], "T0");
    assert_eq!(
        first.status,
        Some(json!({"decorated": true, "conditions": [{"type": "Synced", "status": "True"}]})),
        "its own fields beside the owner's, no observedGeneration"
    );
    assert_eq!(first.dropped, ["status.undeclared"]);
    target["status"] = json!({"replicas": 3, "decorated": true,
                              "conditions": [{"type": "Synced", "status": "True"}]});
    assert_eq!(
        plan(&decorator_info(), &fields, &target, &d, &[], "T1").status,
        None,
        "held already"
    );
}

#[test]
fn an_owners_children_should_not_carry_the_decorator_label() {
    let forged = cm("web", json!({}));
    let mut forged = forged;
    forged["metadata"]["labels"] = json!({DECORATOR_LABEL: "services", "app": "web"});
    let plan = plan(
        &info(),
        &StatusFields::all(),
        &parent(),
        &desired(vec![forged]),
        &[],
        "T",
    );
    assert_eq!(
        plan.children[0].object["metadata"]["labels"],
        json!({"app": "web"})
    );
}

#[test]
fn conditions_should_carry_only_the_fields_the_kind_declares() {
    let some = StatusFields {
        observed_generation: false,
        conditions: Some(vec!["type", "status", "message"]),
        schema: None,
        decorator: false,
    };
    let status = plan(&info(), &some, &parent(), &desired(vec![]), &[], "T0")
        .status
        .unwrap();
    assert_eq!(
        status,
        json!({"conditions": [{"type": "Synced", "status": "True", "message": ""}]})
    );
    let failed = failure_status(&parent(), "ApplyError", "boom", &some, "T0").unwrap();
    assert_eq!(
        failed,
        json!({"conditions": [{"type": "Synced", "status": "False", "message": "boom"}]})
    );
}

#[test]
fn finalizer_should_be_added_and_removed_only_after_finalized() {
    let mut i = info();
    i.finalizer = true;
    assert_eq!(
        plan(
            &i,
            &StatusFields::all(),
            &parent(),
            &desired(vec![]),
            &[],
            "T"
        )
        .finalizer,
        Some(FinalizerAction::Add)
    );
    let mut p = parent();
    p["metadata"]["finalizers"] = json!(["reconhost.dev/webapp"]);
    p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(
        plan(&i, &StatusFields::all(), &p, &desired(vec![]), &[], "T").finalizer,
        None
    );
    let mut done = desired(vec![]);
    done.finalized = true;
    assert_eq!(
        plan(&i, &StatusFields::all(), &p, &done, &[], "T").finalizer,
        Some(FinalizerAction::Remove)
    );
}

#[test]
fn finalizer_left_by_an_earlier_version_should_be_removed() {
    let i = info();
    assert!(!i.finalizer, "this version asks for none");
    let mut p = parent();
    p["metadata"]["finalizers"] = json!(["other.example/keep", "reconhost.dev/webapp"]);
    assert_eq!(
        plan(&i, &StatusFields::all(), &p, &desired(vec![]), &[], "T").finalizer,
        Some(FinalizerAction::Remove)
    );
    p["metadata"]["finalizers"] = json!(["other.example/keep"]);
    assert_eq!(
        plan(&i, &StatusFields::all(), &p, &desired(vec![]), &[], "T").finalizer,
        None
    );
}

#[test]
fn subset_should_compare_arrays_exactly_and_numbers_by_value() {
    assert!(is_subset(
        &json!({"a": [1, {"b": 2}]}),
        &json!({"a": [1.0, {"b": 2, "c": 3}], "z": 1})
    ));
    assert!(!is_subset(&json!({"a": [1]}), &json!({"a": [1, 2]})));
    assert!(!is_subset(&json!({"a": "x"}), &json!({})));
    assert!(is_subset(&json!({"a": {}}), &json!({})));
}

mod sequence;
