//! The supervisor: owns the running controllers and adds, replaces and removes them while the
//! host runs.
//!
//! Each controller is claimed by an *owner*: a ReconcilePlugin (by name) in the dynamic mode, a
//! `--plugin` file in the static mode. The supervisor keeps the rules that make plugins
//! independent of each other:
//! - one controller per parent kind: a second owner for a kind is refused, except that
//!   decorators (which write no status and tell their children apart) may share a kind with
//!   each other and with the kind's own plugin;
//! - one owner per plugin name: the name is the field manager, the finalizer and the metrics
//!   label, so two plugins sharing it would take over each other's fields and finalizers;
//! - an owner's plugin keeps its name and parent kind across versions: a renamed plugin would
//!   leave its old finalizer on every parent, where nothing would ever remove it.
//!
//! [`Supervisor::apply`] installs or upgrades: it prepares the new revision beside the running
//! one, waits (bounded) for its caches, and swaps; on any failure the running revision, if
//! any, keeps serving untouched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::info;

use crate::cache::GroupKind;
use crate::controller::route::Assignment;
use crate::controller::{Context, Controller, PrepareError, Revision, Spec, short};
use crate::shard::counts::{self, Attempts, Counts, RingCounts};

/// Why the supervisor refused or could not complete an install.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Another owner already runs a plugin for this parent kind.
    #[error("parent kind {parent} is already reconciled by {other}")]
    KindTaken {
        /// The parent kind.
        parent: GroupKind,
        /// The owner that has it.
        other: String,
    },
    /// Another owner's plugin has the same name.
    #[error(
        "plugin name {name:?} is already used by {other} (names must be unique: they are field managers and finalizers)"
    )]
    NameTaken {
        /// The plugin name.
        name: String,
        /// The owner that has it.
        other: String,
    },
    /// The new version calls itself differently than the running one.
    #[error(
        "the plugin renamed itself from {from:?} to {to:?}; a plugin keeps its name across versions (its finalizer and field manager derive from it): install the new name as a new plugin and remove the old one"
    )]
    NameChanged {
        /// The running plugin's name.
        from: String,
        /// The new version's name.
        to: String,
    },
    /// The new version reconciles another kind than the running one.
    #[error("the plugin's parent kind changed from {from} to {to}; remove and install it again")]
    ParentChanged {
        /// The running plugin's parent kind.
        from: GroupKind,
        /// The new version's.
        to: GroupKind,
    },
    /// The plugin would turn from a decorator into its parents' owner, or back.
    #[error(
        "a plugin cannot turn from a decorator into its parents' owner or back (their children are told apart); remove and install it again"
    )]
    RoleChanged,
    /// The revision could not be prepared (a kind not served, a rule of the host broken).
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The plugin's children would be parents of its own parent kind, through other plugins.
    #[error(
        "the plugin's children would come back to it as parents: {}; the host would reconcile its own output without end",
        cycle.iter().map(ToString::to_string).collect::<Vec<_>>().join(" → ")
    )]
    Cycle {
        /// The kinds along the cycle, starting and ending at the parent kind.
        cycle: Vec<GroupKind>,
    },
    /// The API server refuses to let the host itself list or watch a kind the plugin uses.
    #[error(
        "the host may not list and watch {kind}: {message}; whoever installs the plugin grants it (reconhost plugin rbac prints a ClusterRole labelled reconhost.dev/aggregate-to-host)"
    )]
    HostForbidden {
        /// The kind.
        kind: GroupKind,
        /// The API server's message.
        message: String,
    },
    /// The plugin's caches did not hold their first list in time.
    #[error("the caches of {} did not sync within {} s (can the host list and watch them?)", kinds.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "), after.as_secs())]
    NotSynced {
        /// The kinds still waiting for their first list.
        kinds: Vec<GroupKind>,
        /// How long the supervisor waited.
        after: Duration,
    },
}

/// What [`Supervisor::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A new controller runs the plugin.
    Installed,
    /// The running controller now serves the new revision; `from` is the digest it replaced.
    Upgraded {
        /// The digest of the replaced revision.
        from: String,
    },
}

/// The running controllers by owner.
pub struct Supervisor {
    ctx: Context,
    entries: Arc<Mutex<HashMap<String, Arc<Controller>>>>,
    /// The child kinds each owner's plugin creates, for the cycle check.
    edges: Mutex<HashMap<String, (GroupKind, Vec<GroupKind>)>>,
    sync_timeout: Duration,
    /// The parents this replica owns, as the controllers follow it.
    assignment: tokio::sync::watch::Sender<Assignment>,
    /// What the other members of a sharding ring counted of the rollouts in progress.
    ring_counts: RingCounts,
    /// Where this replica's counters of each rollout in progress start, for the others.
    attempts: Attempts,
}

/// Makes every controller follow the replica's leadership (leader election: all parents or
/// none) until the election ends.
pub async fn follow_leadership(
    supervisor: std::sync::Weak<Supervisor>,
    mut leading: tokio::sync::watch::Receiver<bool>,
) {
    while leading.changed().await.is_ok() {
        let now = *leading.borrow_and_update();
        let Some(supervisor) = supervisor.upgrade() else {
            return;
        };
        let assignment = if now {
            Assignment::All
        } else {
            Assignment::Nothing
        };
        supervisor.assign(assignment);
    }
}

impl Supervisor {
    /// A supervisor starting controllers on `ctx`, waiting at most `sync_timeout` for a new
    /// revision's caches; it publishes the replica's assignment on `assignment` (whose
    /// receiver is `ctx.assignment`).
    pub fn new(
        ctx: Context,
        sync_timeout: Duration,
        assignment: tokio::sync::watch::Sender<Assignment>,
    ) -> Self {
        Self {
            ctx,
            entries: Arc::default(),
            edges: Mutex::new(HashMap::new()),
            sync_timeout,
            assignment,
            ring_counts: RingCounts::default(),
            attempts: Attempts::default(),
        }
    }

    /// What the other members of this replica's ring counted of the rollouts in progress, as
    /// their Leases last said (nothing without sharding).
    pub fn ring_counts(&self) -> &RingCounts {
        &self.ring_counts
    }

    /// Starts `owner`'s rollout attempt for the spec whose fingerprint is `fingerprint`: the
    /// counters this replica publishes of it start now. Called before its candidate is staged.
    pub fn start_attempt(&self, owner: &str, fingerprint: u64) {
        let stable = self
            .controller(owner)
            .and_then(|c| c.current())
            .map(|stable| stable.health().snapshot())
            .unwrap_or_default();
        self.attempts.start(owner, counts::tag(fingerprint), stable);
    }

    /// This replica's counters of each rollout in progress, for its ring Lease.
    pub fn rollout_counts(&self) -> Counts {
        let entries = self.entries.lock().expect("supervisor lock poisoned");
        entries
            .iter()
            .filter_map(|(owner, controller)| {
                let (candidate, _) = controller.candidate()?;
                let stable = controller.current()?;
                let counted = self.attempts.counted(
                    owner,
                    candidate.plugin().digest(),
                    stable.health().snapshot(),
                    candidate.health().snapshot(),
                )?;
                Some((owner.clone(), counted))
            })
            .collect()
    }

    /// Gives every controller, and every one started from now on, the parents this replica
    /// owns now (see [`Controller::assign`]); their pools follow in the background.
    pub fn assign(&self, assignment: Assignment) {
        // A ring is read every retry period; most readings change nothing, and following one
        // walks every cached parent.
        if *self.assignment.borrow() == assignment {
            return;
        }
        self.assignment.send_replace(assignment.clone());
        for controller in self.controllers() {
            controller.assign(&assignment);
            // Not awaited here: a swap or a suspend in progress holds the pool for up to the
            // grace period, longer than a ring member may go without renewing.
            tokio::spawn(async move { controller.staff().await });
        }
        let sharded = self.ctx.informers.sieve().is_some();
        if sharded {
            // The children of parents given up become stubs; a walk of every cached child,
            // kept off the ring's task.
            let informers = self.ctx.informers.clone();
            tokio::task::spawn_blocking(move || {
                let shrunk = informers.resieve();
                if shrunk > 0 {
                    tracing::debug!(
                        objects = shrunk,
                        "children of parents given up kept as stubs"
                    );
                }
            });
        }
        // The children of parents gained, or about to be, fetched whole ahead of their
        // reconciles. Not for a member that lost everything (it could not renew: cut off, or
        // paused): its sieve keeps every child while it owns nothing, and fetching them all
        // would only load an API server it may not even reach.
        if sharded && !assignment.is_nothing() {
            let informers = self.ctx.informers.clone();
            tokio::spawn(async move {
                let fetched = informers.prefetch().await;
                if fetched > 0 {
                    tracing::debug!(
                        objects = fetched,
                        "children of parents to come fetched whole"
                    );
                }
            });
        }
    }

    /// Reconciles in flight for parents this replica no longer owns, across controllers.
    pub fn moving(&self) -> usize {
        self.controllers().iter().map(|c| c.moving()).sum()
    }

    /// Children in the sieved caches: how many whole and how many stubs.
    pub fn cached_children(&self) -> (usize, usize) {
        self.ctx.informers.sieved_objects()
    }

    /// Reconciles in flight, across controllers.
    pub fn in_flight(&self) -> usize {
        self.controllers().iter().map(|c| c.in_flight()).sum()
    }

    /// The parents each controller owns, by plugin name.
    pub fn owned(&self) -> Vec<(String, usize)> {
        self.controllers()
            .iter()
            .map(|c| (c.name().to_owned(), c.owned()))
            .collect()
    }

    fn controllers(&self) -> Vec<Arc<Controller>> {
        self.entries
            .lock()
            .expect("supervisor lock poisoned")
            .values()
            .cloned()
            .collect()
    }

    /// The controller context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Installs `spec` for `owner`, or replaces what `owner` runs. On error nothing changes.
    pub async fn apply(&self, owner: &str, spec: Spec) -> Result<Applied, SupervisorError> {
        let start = Instant::now();
        let info = spec.plugin.info().clone();
        let parent = GroupKind::from(&info.parent);
        let children: Vec<GroupKind> = info.children.iter().map(GroupKind::from).collect();
        if let Some(cycle) = self.cycle(owner, &parent, &children) {
            self.ctx.metrics.swaps().failed.inc();
            return Err(SupervisorError::Cycle { cycle });
        }
        let decorator = spec.decorator.is_some();
        let (controller, fresh) = self.claim(owner, &info.name, &parent, decorator)?;
        let result = self.prepare_and_swap(&controller, spec).await;
        let swaps = self.ctx.metrics.swaps();
        match result {
            Ok(replaced) => {
                let digest = controller
                    .current()
                    .map(|g| short(g.plugin().digest()).to_owned())
                    .unwrap_or_default();
                let applied = match replaced {
                    Some(old) => {
                        swaps.upgraded.inc();
                        Applied::Upgraded {
                            from: old.plugin().digest().to_owned(),
                        }
                    }
                    None => {
                        swaps.installed.inc();
                        Applied::Installed
                    }
                };
                self.edges
                    .lock()
                    .expect("supervisor lock poisoned")
                    .insert(owner.to_owned(), (parent.clone(), children));
                info!(%owner, plugin = %info.name, version = %info.version, %parent, %digest,
                      result = ?applied, ms = start.elapsed().as_millis() as u64, "plugin serving");
                Ok(applied)
            }
            Err(error) => {
                swaps.failed.inc();
                if fresh {
                    self.entries
                        .lock()
                        .expect("supervisor lock poisoned")
                        .remove(owner);
                    controller.stop().await;
                }
                Err(error)
            }
        }
    }

    /// The controller `owner` runs, creating (and claiming) one if it has none. Checks the
    /// uniqueness rules under the lock, so two owners racing for a kind cannot both win.
    fn claim(
        &self,
        owner: &str,
        name: &str,
        parent: &GroupKind,
        decorator: bool,
    ) -> Result<(Arc<Controller>, bool), SupervisorError> {
        let mut entries = self.entries.lock().expect("supervisor lock poisoned");
        for (other, controller) in entries.iter().filter(|(o, _)| *o != owner) {
            if controller.parent() == parent && !decorator && !controller.decorates() {
                return Err(SupervisorError::KindTaken {
                    parent: parent.clone(),
                    other: other.clone(),
                });
            }
            if controller.name() == name {
                return Err(SupervisorError::NameTaken {
                    name: name.to_owned(),
                    other: other.clone(),
                });
            }
        }
        if let Some(controller) = entries.get(owner) {
            if controller.name() != name {
                return Err(SupervisorError::NameChanged {
                    from: controller.name().to_owned(),
                    to: name.to_owned(),
                });
            }
            if controller.parent() != parent {
                return Err(SupervisorError::ParentChanged {
                    from: controller.parent().clone(),
                    to: parent.clone(),
                });
            }
            if controller.decorates() != decorator {
                return Err(SupervisorError::RoleChanged);
            }
            return Ok((controller.clone(), false));
        }
        let controller = Arc::new(Controller::new(
            name,
            parent.clone(),
            decorator,
            self.ctx.clone(),
        ));
        entries.insert(owner.to_owned(), controller.clone());
        Ok((controller, true))
    }

    async fn prepare_and_swap(
        &self,
        controller: &Controller,
        spec: Spec,
    ) -> Result<Option<Arc<Revision>>, SupervisorError> {
        let revision = self.prepare_on(controller, spec).await?;
        Ok(controller.swap(revision).await)
    }

    /// Prepares a revision of `spec` on the controller `owner` already runs, and waits
    /// (bounded) for its caches: a rollout's candidate. `None` if `owner` runs nothing.
    pub async fn prepare(
        &self,
        owner: &str,
        spec: Spec,
    ) -> Option<Result<Revision, SupervisorError>> {
        let controller = self.controller(owner)?;
        Some(self.prepare_on(&controller, spec).await)
    }

    async fn prepare_on(
        &self,
        controller: &Controller,
        spec: Spec,
    ) -> Result<Revision, SupervisorError> {
        let revision = controller.prepare(spec).await?;
        // A refusal seen on two looks a second apart is no RBAC change still propagating:
        // say so now rather than after the whole sync timeout.
        let refused = async {
            let mut seen = false;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match revision.forbidden() {
                    Some((kind, message)) if seen => {
                        return SupervisorError::HostForbidden { kind, message };
                    }
                    found => seen = found.is_some(),
                }
            }
        };
        tokio::select! {
            synced = tokio::time::timeout(self.sync_timeout, revision.wait_synced()) => {
                if synced.is_err() {
                    return Err(SupervisorError::NotSynced {
                        kinds: revision.unsynced(),
                        after: self.sync_timeout,
                    });
                }
            }
            error = refused => return Err(error),
        }
        Ok(revision)
    }

    /// The cycle the plugin of `owner` would close, if any: following "a plugin of kind K
    /// creates children of kind C, which another plugin reconciles as parents" from the
    /// plugin's children back to its own parent kind.
    fn cycle(
        &self,
        owner: &str,
        parent: &GroupKind,
        children: &[GroupKind],
    ) -> Option<Vec<GroupKind>> {
        let edges = self.edges.lock().expect("supervisor lock poisoned");
        let mut graph: HashMap<&GroupKind, &[GroupKind]> = edges
            .iter()
            .filter(|(o, _)| *o != owner)
            .map(|(_, (p, c))| (p, c.as_slice()))
            .collect();
        graph.insert(parent, children);
        // Depth-first from the parent; the path found back to it is the cycle.
        let mut path = vec![parent.clone()];
        let mut seen = std::collections::HashSet::new();
        fn walk(
            graph: &HashMap<&GroupKind, &[GroupKind]>,
            target: &GroupKind,
            path: &mut Vec<GroupKind>,
            seen: &mut std::collections::HashSet<GroupKind>,
        ) -> bool {
            let from = path.last().expect("the path starts at the parent").clone();
            for next in graph.get(&from).copied().unwrap_or_default() {
                path.push(next.clone());
                if next == target || (seen.insert(next.clone()) && walk(graph, target, path, seen))
                {
                    return true;
                }
                path.pop();
            }
            false
        }
        walk(&graph, parent, &mut path, &mut seen).then_some(path)
    }

    /// The controller `owner` runs.
    pub fn controller(&self, owner: &str) -> Option<Arc<Controller>> {
        self.entries
            .lock()
            .expect("supervisor lock poisoned")
            .get(owner)
            .cloned()
    }

    /// Stops `owner`'s controller in order and forgets it; returns whether there was one.
    pub async fn remove(&self, owner: &str) -> bool {
        let removed = self
            .entries
            .lock()
            .expect("supervisor lock poisoned")
            .remove(owner);
        self.edges
            .lock()
            .expect("supervisor lock poisoned")
            .remove(owner);
        self.attempts.forget(owner);
        match removed {
            Some(controller) => {
                controller.stop().await;
                info!(%owner, plugin = %controller.name(), "plugin removed");
                true
            }
            None => false,
        }
    }

    /// Stops every controller at once, each draining for at most the grace period.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Controller>> = self
            .entries
            .lock()
            .expect("supervisor lock poisoned")
            .drain()
            .map(|(_, c)| c)
            .collect();
        futures::future::join_all(all.iter().map(|c| c.stop())).await;
    }

    /// How many controllers run.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("supervisor lock poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Informers;
    use crate::metrics::Metrics;

    /// A supervisor whose client points nowhere: claiming never talks to the API server.
    fn supervisor() -> Supervisor {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let assignment = tokio::sync::watch::Sender::new(Assignment::All);
        let ctx = Context {
            informers: Informers::new(client.clone(), None, Duration::from_secs(290), None),
            client: client.clone(),
            metrics: Metrics::new(),
            global: Arc::new(tokio::sync::Semaphore::new(1)),
            sync_period: Duration::ZERO,
            grace: Duration::from_secs(1),
            access: Arc::new(crate::identity::access::Access::new(client.clone())),
            allow_builtin_parents: false,
            fights: crate::controller::fight::FightPolicy::default(),
            leading: tokio::sync::watch::channel(true).1,
            assignment: assignment.subscribe(),
            protected_namespaces: Default::default(),
            lease: None,
            guest_memory: crate::controller::guest_memory::GuestMemory::new(None),
        };
        Supervisor::new(ctx, Duration::from_secs(1), assignment)
    }

    fn kind(kind: &str) -> GroupKind {
        GroupKind::of("example.com/v1", kind)
    }

    #[tokio::test]
    async fn claims_should_keep_kinds_and_names_unique_and_names_fixed() {
        let s = supervisor();
        let (_, fresh) = s.claim("a", "widget", &kind("Widget"), false).unwrap();
        assert!(fresh);
        let (_, fresh) = s.claim("a", "widget", &kind("Widget"), false).unwrap();
        assert!(!fresh, "the owner's own controller again");
        assert!(matches!(
            s.claim("b", "other", &kind("Widget"), false),
            Err(SupervisorError::KindTaken { other, .. }) if other == "a"
        ));
        assert!(matches!(
            s.claim("b", "widget", &kind("Gadget"), false),
            Err(SupervisorError::NameTaken { other, .. }) if other == "a"
        ));
        assert!(matches!(
            s.claim("a", "renamed", &kind("Widget"), false),
            Err(SupervisorError::NameChanged { .. })
        ));
        assert!(matches!(
            s.claim("a", "widget", &kind("Gadget"), false),
            Err(SupervisorError::ParentChanged { .. })
        ));
        assert!(
            s.claim("b", "gadget", &kind("Gadget"), false).is_ok(),
            "another kind and name"
        );
        assert_eq!(s.len(), 2);
        assert!(s.remove("a").await);
        assert!(
            s.claim("c", "widget", &kind("Widget"), false).is_ok(),
            "free again once removed"
        );
    }

    #[tokio::test]
    async fn decorators_should_share_a_kind_with_each_other_and_its_owner_but_keep_their_names() {
        let s = supervisor();
        assert!(s.claim("owner", "widget", &kind("Widget"), false).is_ok());
        assert!(s.claim("d1", "services", &kind("Widget"), true).is_ok());
        assert!(s.claim("d2", "roles", &kind("Widget"), true).is_ok());
        assert!(matches!(
            s.claim("d3", "roles", &kind("Widget"), true),
            Err(SupervisorError::NameTaken { other, .. }) if other == "d2"
        ));
        assert!(matches!(
            s.claim("second", "other", &kind("Widget"), false),
            Err(SupervisorError::KindTaken { other, .. }) if other == "owner"
        ));
        assert_eq!(s.len(), 3);
        assert!(s.remove("owner").await);
        assert!(matches!(
            s.claim("d1", "services", &kind("Widget"), false),
            Err(SupervisorError::RoleChanged)
        ));
    }

    #[tokio::test]
    async fn a_plugin_whose_children_come_back_as_its_parents_should_be_found() {
        let s = supervisor();
        s.edges.lock().unwrap().insert(
            "a".into(),
            (kind("App"), vec![kind("Database"), kind("Secret")]),
        );
        s.edges
            .lock()
            .unwrap()
            .insert("b".into(), (kind("Database"), vec![kind("Volume")]));
        assert_eq!(
            s.cycle("c", &kind("Volume"), &[kind("Backup")]),
            None,
            "no way back"
        );
        assert_eq!(
            s.cycle("c", &kind("Volume"), &[kind("App")]),
            Some(vec![
                kind("Volume"),
                kind("App"),
                kind("Database"),
                kind("Volume")
            ])
        );
        assert_eq!(
            s.cycle("a", &kind("App"), &[kind("Secret")]),
            None,
            "the owner's own old edges do not count against its upgrade"
        );
        assert!(s.cycle("d", &kind("Gadget"), &[kind("Gadget")]).is_some());
    }
}
