//! What the audit log says of one writer's requests in a namespace: how many of each form (verb,
//! resource and subresource, field manager, force, the impersonated user if any), how many were
//! refused, and when the first and the last completed, as seconds after the clock started. The
//! two writers must show the same forms in the same numbers; their windows separate start-up
//! from throughput.

use std::collections::BTreeMap;

use reconhost_tests::AuditEvent;
use reconhost_tests::world::World;

/// One writer's requests.
#[derive(Debug, Clone, Default)]
pub struct Writes {
    /// Requests by form, e.g. `patch deployments fieldManager=reconhost/webapp force=true`.
    pub forms: BTreeMap<String, usize>,
    /// Requests the API server answered with anything but 2xx.
    pub refused: usize,
    /// When the first and the last request completed, seconds after the clock started.
    pub window: Option<(f64, f64)>,
}

impl Writes {
    /// The writes after mark `since` (a [`World::writes`]) in `world`'s namespace by the writer
    /// `by` picks, with times relative to `start` (wall clock, as the audit log's).
    pub fn read(
        world: &World,
        since: usize,
        start: jiff::Timestamp,
        by: impl Fn(&AuditEvent) -> bool,
    ) -> Self {
        let events = world
            .cluster
            .audit_log()
            .events_in(&world.namespace)
            .expect("reading the audit log");
        let mut writes = Self::default();
        let mut times = Vec::new();
        for event in events.iter().skip(since).filter(|e| by(e)) {
            *writes.forms.entry(form(event)).or_default() += 1;
            let code = event.response_status.as_ref().map_or(0, |s| s.code);
            if !(200..300).contains(&code) {
                writes.refused += 1;
            }
            if let Ok(at) = event.stage_timestamp.parse::<jiff::Timestamp>() {
                times.push(at.duration_since(start).as_secs_f64());
            }
        }
        times.sort_by(f64::total_cmp);
        writes.window = times.first().zip(times.last()).map(|(a, b)| (*a, *b));
        writes
    }

    /// All requests.
    pub fn total(&self) -> usize {
        self.forms.values().sum()
    }
}

/// `verb resource[/subresource] fieldManager=... force=...` of a request.
fn form(event: &AuditEvent) -> String {
    let (resource, subresource) = event
        .object_ref
        .as_ref()
        .map_or(("?", ""), |o| (o.resource.as_str(), o.subresource.as_str()));
    let mut form = format!("{} {resource}", event.verb);
    if !subresource.is_empty() {
        form.push('/');
        form.push_str(subresource);
    }
    let query = event.request_uri.split_once('?').map_or("", |(_, q)| q);
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| p.starts_with("fieldManager=") || p.starts_with("force="))
        .map(|p| p.replace("%2F", "/").replace("%2f", "/"))
        .collect();
    params.sort();
    for p in params {
        form.push(' ');
        form.push_str(&p);
    }
    if let Some(user) = &event.impersonated_user {
        form.push_str(" as ");
        form.push_str(&user.username);
    }
    form
}
