//! Update strategies, waves and readiness (contract 0.2), and the parent's metadata.
use super::*;
use crate::model::{
    Comparison, Operand, ParentMetadata, ReadyCheck, Strategies, UpdateMethod, UpdateStrategy,
};
use crate::planner::sequence::ready;

fn with_strategy(method: UpdateMethod, status_checks: Vec<ReadyCheck>) -> PluginInfo {
    PluginInfo {
        strategies: Strategies(vec![(
            KindRef::new("v1", "ConfigMap"),
            UpdateStrategy {
                method,
                status_checks,
            },
        )]),
        ..info()
    }
}

fn approved() -> ReadyCheck {
    ReadyCheck::Field {
        path: "data.approved".into(),
        comparison: Comparison::Equal,
        operand: Operand::Field("data.version".into()),
    }
}

/// Plans and orders, as the reconciler does.
fn ordered(info: &PluginInfo, desired: &Desired, observed: &[Value]) -> Plan {
    let fields = StatusFields::all();
    let mut plan = plan(info, &fields, &parent(), desired, observed, "T0");
    sequence(&mut plan, info, &fields, &parent(), desired, observed, "T0");
    plan
}

fn actions(plan: &Plan) -> Vec<(String, Action)> {
    plan.children
        .iter()
        .map(|c| (c.name.clone(), c.action))
        .collect()
}

fn synced(plan: &Plan) -> (String, String, String) {
    let status = plan.status.as_ref().expect("a status is planned");
    let c = status["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == SYNCED))
        .expect("a Synced condition");
    let s = |k: &str| c[k].as_str().unwrap_or("").to_owned();
    (s("status"), s("reason"), s("message"))
}

#[test]
fn on_delete_should_keep_a_differing_child_and_still_create_a_missing_one() {
    let info = with_strategy(UpdateMethod::OnDelete, vec![]);
    let d = desired(vec![cm("x", json!({"v": "2"})), cm("y", json!({"v": "2"}))]);
    let plan = ordered(&info, &d, &[observed("x", json!({"v": "1"}))]);
    assert_eq!(
        actions(&plan),
        [("x".into(), Action::Kept), ("y".into(), Action::Create)]
    );
    assert_eq!(
        synced(&plan).0,
        "True",
        "keeping is the strategy, not progress"
    );
}

#[test]
fn recreate_should_delete_a_differing_child_with_its_uid_unless_it_is_already_going() {
    let info = with_strategy(UpdateMethod::Recreate, vec![]);
    let d = desired(vec![cm("x", json!({"v": "2"}))]);
    let plan = ordered(&info, &d, &[observed("x", json!({"v": "1"}))]);
    assert_eq!(plan.children[0].action, Action::Recreate);
    assert_eq!(plan.children[0].uid.as_deref(), Some("uid-x"));

    let mut going = observed("x", json!({"v": "1"}));
    going["metadata"]["deletionTimestamp"] = json!("T0");
    let plan = ordered(&info, &d, &[going]);
    assert_eq!(plan.children[0].action, Action::Waiting);
    // Gone: created anew, in the desired state.
    let plan = ordered(&info, &d, &[]);
    assert_eq!(plan.children[0].action, Action::Create);
}

#[test]
fn a_rolling_update_should_change_one_child_at_a_time_and_pause_on_an_unready_one() {
    let info = with_strategy(UpdateMethod::RollingInPlace, vec![approved()]);
    let want = |n: &str| cm(n, json!({"version": "2"}));
    let d = desired(vec![want("a"), want("b"), want("c")]);
    let old = |n: &str| observed(n, json!({"version": "1", "approved": "1"}));

    let plan = ordered(&info, &d, &[old("a"), old("b"), old("c")]);
    assert_eq!(
        actions(&plan),
        [
            ("a".into(), Action::Update),
            ("b".into(), Action::Waiting),
            ("c".into(), Action::Waiting)
        ]
    );
    let (status, reason, message) = synced(&plan);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Progressing"));
    assert!(message.contains("ConfigMap a/a first"), "{message}");

    // a changed but not approved yet: nothing else moves.
    let a_new = observed("a", json!({"version": "2", "approved": "1"}));
    let plan = ordered(&info, &d, &[a_new, old("b"), old("c")]);
    assert_eq!(
        actions(&plan)[1..],
        [("b".into(), Action::Waiting), ("c".into(), Action::Waiting)]
    );
    let message = synced(&plan).2;
    assert!(
        message.contains("paused: ConfigMap a/a is not ready: data.approved is \"1\""),
        "{message}"
    );

    // Approved: the next one goes.
    let a_ok = observed("a", json!({"version": "2", "approved": "2"}));
    let plan = ordered(&info, &d, &[a_ok, old("b"), old("c")]);
    assert_eq!(
        actions(&plan),
        [
            ("a".into(), Action::Unchanged),
            ("b".into(), Action::Update),
            ("c".into(), Action::Waiting)
        ]
    );
}

#[test]
fn a_rolling_recreate_should_wait_for_the_recreated_child_before_the_next() {
    let info = with_strategy(UpdateMethod::RollingRecreate, vec![]);
    let d = desired(vec![cm("a", json!({"v": "2"})), cm("b", json!({"v": "2"}))]);
    let plan = ordered(&info, &d, &[observed("b", json!({"v": "1"}))]);
    assert_eq!(
        actions(&plan),
        [("a".into(), Action::Create), ("b".into(), Action::Waiting)],
        "a is being created: b waits"
    );
    let plan = ordered(
        &info,
        &d,
        &[
            observed("a", json!({"v": "2"})),
            observed("b", json!({"v": "1"})),
        ],
    );
    assert_eq!(plan.children[1].action, Action::Recreate);
}

#[test]
fn the_third_wave_should_wait_for_the_seconds_readiness() {
    let mut d = desired(vec![
        cm("a", json!({"v": "1"})),
        cm("b", json!({"v": "1"})),
        cm("c", json!({"v": "1"})),
    ]);
    d.children[1].wave = 1;
    d.children[1].ready_when = vec![ReadyCheck::Field {
        path: "data.ready".into(),
        comparison: Comparison::Equal,
        operand: Operand::Value(json!("yes")),
    }];
    d.children[2].wave = 2;

    let plan = ordered(&info(), &d, &[]);
    assert_eq!(
        actions(&plan),
        [
            ("a".into(), Action::Create),
            ("b".into(), Action::Waiting),
            ("c".into(), Action::Waiting)
        ]
    );
    assert_eq!(
        synced(&plan).2,
        "waits for wave 0: ConfigMap a/a is being created"
    );

    let a = observed("a", json!({"v": "1"}));
    let plan = ordered(&info(), &d, std::slice::from_ref(&a));
    assert_eq!(
        actions(&plan)[1..],
        [("b".into(), Action::Create), ("c".into(), Action::Waiting)]
    );

    let b = observed("b", json!({"v": "1"}));
    let plan = ordered(&info(), &d, &[a.clone(), b]);
    assert_eq!(plan.children[2].action, Action::Waiting);
    assert_eq!(
        synced(&plan).2,
        "waits for wave 1: ConfigMap a/b is not ready: data.ready is null, not equal to \"yes\""
    );

    let b_ready = observed("b", json!({"v": "1", "ready": "yes"}));
    let plan = ordered(&info(), &d, &[a, b_ready]);
    assert_eq!(plan.children[2].action, Action::Create);
    assert_eq!(synced(&plan).0, "True", "nothing waits any more");
}

#[test]
fn readiness_should_need_a_caught_up_generation_and_every_check() {
    let deployment = |observed_generation: i64, ready: i64| {
        json!({"metadata": {"generation": 4},
               "spec": {"replicas": 3},
               "status": {"observedGeneration": observed_generation, "readyReplicas": ready,
                          "conditions": [{"type": "Available", "status": "True"}]}})
    };
    let checks = [
        ReadyCheck::Condition {
            type_: "Available".into(),
            status: ConditionStatus::True,
        },
        ReadyCheck::Field {
            path: "status.readyReplicas".into(),
            comparison: Comparison::AtLeast,
            operand: Operand::Field("spec.replicas".into()),
        },
    ];
    assert_eq!(ready(&deployment(4, 3), &checks), Ok(()));
    assert_eq!(
        ready(&deployment(3, 3), &checks),
        Err("not ready: status.observedGeneration 3 is behind generation 4".into())
    );
    assert_eq!(
        ready(&deployment(4, 2), &checks),
        Err("not ready: status.readyReplicas is 2, not at least spec.replicas (3)".into())
    );
    let missing = [ReadyCheck::Condition {
        type_: "Progressing".into(),
        status: ConditionStatus::True,
    }];
    assert_eq!(
        ready(&deployment(4, 3), &missing),
        Err("not ready: it has no condition Progressing".into())
    );
    let numbers = [ReadyCheck::Field {
        path: "spec.replicas".into(),
        comparison: Comparison::Equal,
        operand: Operand::Value(json!(3.0)),
    }];
    assert_eq!(
        ready(&deployment(4, 3), &numbers),
        Ok(()),
        "numbers by value"
    );
}

#[test]
fn parent_metadata_should_be_applied_when_missing_and_released_when_dropped() {
    let mut d = desired(vec![]);
    d.parent_metadata = Some(ParentMetadata {
        labels: [("team".to_owned(), "a".to_owned())].into(),
        annotations: Default::default(),
    });
    let planned = plan(&info(), &StatusFields::all(), &parent(), &d, &[], "T0");
    assert_eq!(planned.metadata, Some(json!({"labels": {"team": "a"}})));

    // Held, and owned: nothing to send.
    let mut holding = parent();
    holding["metadata"]["labels"] = json!({"team": "a", "other": "kept"});
    holding["metadata"]["managedFields"] = json!([{
        "manager": "reconhost/webapp", "operation": "Apply",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}]);
    let planned = plan(&info(), &StatusFields::all(), &holding, &d, &[], "T0");
    assert_eq!(planned.metadata, None);

    // No longer asked for: an empty apply gives the key up.
    d.parent_metadata = None;
    let planned = plan(&info(), &StatusFields::all(), &holding, &d, &[], "T0");
    assert_eq!(planned.metadata, Some(json!({})));
    // Never set any: nothing.
    let planned = plan(&info(), &StatusFields::all(), &parent(), &d, &[], "T0");
    assert_eq!(planned.metadata, None);
}
