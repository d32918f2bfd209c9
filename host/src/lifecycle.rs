//! The ReconcilePlugin controller: installs, upgrades, suspends and uninstalls plugins while
//! the host runs, with the same queue and backoff discipline as any controller.
//!
//! One reconcile of a ReconcilePlugin:
//! 1. gone, or being deleted: stop its controller, release its parents (the host's finalizer
//!    comes off each, so they stay deletable), then let the resource go ([`uninstall`]);
//! 2. otherwise make sure the host's finalizer is on it, so step 1 cannot be skipped;
//! 3. when the spec's digest, config or limits differ from what serves: load the component
//!    ([`load`]: fetch, verify, compile; straight from the compiled-code cache when the resource
//!    already served this digest), check that it reconciles
//!    `spec.parent`, and hand it to the [`Supervisor`], which swaps it in once its caches have
//!    synced. Any failure leaves the running version, if there is one, serving;
//! 4. suspend or resume the controller as `spec.suspend` says;
//! 5. write the status ([`status`]): `activeDigest`, what the plugin declared, and the
//!    conditions `Fetched`, `Compiled`, `Ready`, whose reasons name the cause.
//!
//! A failure is retried with backoff (1 s doubling to 5 min: a retry fetches and compiles, so
//! client-go's 5 ms start would pull a broken artifact ten times in its first seconds). A plugin
//! waiting for a kind the API server does not serve yet is looked at again every 10 s instead,
//! so a CRD installed later starts its plugin promptly without the host watching every CRD.

pub mod events;
pub mod failure;
pub mod load;
pub mod parents;
mod progress;
pub mod rollout;
mod rollout_status;
pub mod spec;
pub mod status;
pub mod uninstall;
pub mod writes;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::Api;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tracing::{info, warn};

pub use self::failure::{Failure, Stage};
use self::load::{Loader, Obtained};
use self::spec::fingerprint;
pub use self::spec::limits_of;
use self::writes::Writer;
use crate::api::{self, ReconcilePlugin, UNINSTALL_FINALIZER};
use crate::cache::{DiscoveryError, InformerRef, Informers, ObjectKey, Registration};
use crate::controller::queue::{Backoff, Priority, WorkQueue};
use crate::controller::workers::{self, Next, Stop};
use crate::controller::{Spec, same_kind};
use crate::identity::access::{ALLOWED_TTL, Access, DENIED_TTL, Question};
use crate::identity::{Identity, rbac};
use crate::metrics::Metrics;
use crate::model::KindRef;
use crate::runtime::{Limits, Plugin};
use crate::selector::Selector;
use crate::supervisor::Supervisor;
use k8s_openapi::api::core::v1::ServiceAccount;

/// Backoff of failed installs.
const BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    max: Duration::from_secs(300),
};

/// How often a plugin waiting for a kind to be served looks again.
const KIND_POLL: Duration = Duration::from_secs(10);

/// How often a healthy ReconcilePlugin is looked at again, so its `Authorized` condition
/// follows changes of RBAC (answers are cached for as long).
const AUTHORIZATION_REFRESH: Duration = ALLOWED_TTL;

/// ReconcilePlugins reconciled at once. Loading is bounded separately (by the compile pool).
const WORKERS: usize = 4;

/// What the host runs for one ReconcilePlugin.
struct Installed {
    /// Hash of what decides the revision: digest, config, limits.
    fingerprint: u64,
    /// The plugin serving.
    plugin: Plugin,
    /// How its component was obtained.
    obtained: Obtained,
    /// Where it came from (for `status.history`).
    source: api::Source,
}

/// Defaults for what a ReconcilePlugin leaves unset.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// Limits of every call.
    pub limits: Limits,
    /// Parents reconciled at once per plugin.
    pub concurrency: usize,
    /// The ReconcilePlugins this host serves (`--plugin-selector`).
    pub selector: Selector,
}

/// The ReconcilePlugin controller.
pub struct Lifecycle {
    client: kube::Client,
    supervisor: Arc<Supervisor>,
    access: Arc<Access>,
    /// Whether this replica leads (writes are the leader's).
    leading: watch::Receiver<bool>,
    loader: Loader,
    defaults: Defaults,
    /// Namespaced parents are released only here when the host watches one namespace.
    namespace: Option<String>,
    plugins: InformerRef,
    writer: Writer,
    queue: WorkQueue<ObjectKey>,
    installed: Mutex<HashMap<String, Installed>>,
    /// Progressive rollouts, by ReconcilePlugin.
    rollouts: Mutex<HashMap<String, progress::Progress>>,
    /// ReconcilePlugins refused for a conflict, to look at again when a plugin goes.
    conflicts: Mutex<HashSet<String>>,
    /// The outcome of each ReconcilePlugin's last attempt, for `reconhost_plugins{state}`.
    states: Mutex<HashMap<String, &'static str>>,
    metrics: Arc<Metrics>,
    /// ReconcilePlugins of the first list not yet reconciled once; `None` before that list.
    initial: Mutex<Option<HashSet<String>>>,
    ready: watch::Sender<bool>,
}

impl Lifecycle {
    /// Starts watching ReconcilePlugins (the CRD must be installed; until it is, this retries).
    /// Call [`Lifecycle::run`] to reconcile them.
    pub async fn start(
        informers: &Informers,
        supervisor: Arc<Supervisor>,
        loader: Loader,
        defaults: Defaults,
        metrics: Arc<Metrics>,
    ) -> Result<(Arc<Self>, Registration), DiscoveryError> {
        let kind = KindRef::new(format!("{}/v1alpha1", api::GROUP), "ReconcilePlugin");
        let plugins = informers.acquire(&kind).await?;
        let queue = WorkQueue::new(metrics.queue("reconcileplugin"), BACKOFF);
        let lifecycle = Arc::new(Self {
            client: informers.client().clone(),
            access: supervisor.context().access.clone(),
            leading: supervisor.context().leading.clone(),
            supervisor,
            loader,
            defaults,
            namespace: informers.namespace().map(str::to_owned),
            writer: Writer::new(informers.client().clone(), plugins.clone()),
            plugins: plugins.clone(),
            queue: queue.clone(),
            installed: Mutex::new(HashMap::new()),
            rollouts: Mutex::new(HashMap::new()),
            conflicts: Mutex::new(HashSet::new()),
            states: Mutex::new(HashMap::new()),
            metrics,
            initial: Mutex::new(None),
            ready: watch::Sender::new(false),
        });
        let registration = plugins.on_change(move |change| {
            if let Some(object) = change.new.or(change.old) {
                let priority = if change.initial {
                    Priority::Low
                } else {
                    Priority::Normal
                };
                queue.add(object.meta.key.clone(), priority);
            }
        });
        Ok((lifecycle, registration))
    }

    /// Reconciles ReconcilePlugins until `stop` fires; in-flight ones finish.
    pub async fn run(self: Arc<Self>, stop: Stop) {
        self.plugins.wait_synced().await;
        let first: HashSet<String> = self
            .plugins
            .store()
            .keys()
            .into_iter()
            .map(|k| k.name)
            .collect();
        info!(plugins = first.len(), "ReconcilePlugins listed");
        let empty = first.is_empty();
        *self.initial.lock().expect("lifecycle lock poisoned") = Some(first);
        if empty {
            self.ready.send_replace(true);
        }
        // A new leader writes what the previous one may not have: every status, again.
        {
            let (mut leading, plugins, queue) = (
                self.leading.clone(),
                self.plugins.clone(),
                self.queue.clone(),
            );
            tokio::spawn(async move {
                while leading.changed().await.is_ok() {
                    if *leading.borrow_and_update() {
                        for key in plugins.store().keys() {
                            queue.add(key, Priority::Normal);
                        }
                    }
                }
            });
        }
        // The parents' standing, followed between the passes above.
        tokio::spawn(Self::follow_parents(Arc::downgrade(&self)));
        let this = self.clone();
        workers::run(
            self.queue.clone(),
            WORKERS,
            Arc::new(Semaphore::new(WORKERS)),
            self.metrics.controller("reconcileplugin"),
            stop,
            move |key: ObjectKey| {
                let this = this.clone();
                let span = tracing::info_span!("reconcileplugin", name = %key.name);
                tracing::Instrument::instrument(
                    async move { this.reconcile(&key.name).await },
                    span,
                )
            },
        )
        .await;
    }

    /// True once every ReconcilePlugin of the first list has been reconciled once (whatever
    /// the outcome): what readiness waits for.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }

    async fn reconcile(&self, name: &str) -> Next {
        let next = self.reconcile_inner(name).await;
        let mut initial = self.initial.lock().expect("lifecycle lock poisoned");
        if let Some(pending) = initial.as_mut()
            && pending.remove(name)
            && pending.is_empty()
        {
            self.ready.send_replace(true);
        }
        drop(initial);
        self.publish_states();
        next
    }

    async fn reconcile_inner(&self, name: &str) -> Next {
        let Some(cached) = self.plugins.store().get("", name) else {
            // Gone without our finalizer (removed by force): stop what it ran.
            self.forget(name).await;
            return Next::Done;
        };
        if !cached.meta.selected_by(&self.defaults.selector) {
            // Another host's (or nobody's yet): no write, and its parents are not released, so
            // the host it now matches takes it over as it is.
            if self.is_installed(name) {
                info!(
                    plugin = name,
                    "the ReconcilePlugin no longer matches --plugin-selector; stopped serving it"
                );
            }
            self.forget(name).await;
            return Next::Done;
        }
        let object = cached.value();
        let rp: ReconcilePlugin = match serde_json::from_value(object.clone()) {
            Ok(rp) => rp,
            Err(error) => {
                warn!(plugin = name, %error, "a ReconcilePlugin the host cannot read");
                return Next::Terminal;
            }
        };
        // Every replica loads and prepares plugins (so a new leader serves at once); only the
        // leader writes: status, finalizers, the release of parents.
        let leading = *self.leading.borrow();
        if crate::model::is_deleting(&object) {
            if !leading {
                self.forget(name).await;
                return Next::Done;
            }
            return self.uninstall(name, &rp, &object).await;
        }
        if leading
            && !has_finalizer(&object)
            && let Err(error) = self.writer.finalizer(&object, true).await
        {
            warn!(plugin = name, %error, "adding the uninstall finalizer failed; retrying");
            return Next::Retry;
        }

        let identity = Identity::new(
            &rp.spec.service_account_ref.namespace,
            &rp.spec.service_account_ref.name,
        );
        // Without its account, or without the host's right to act as it, the plugin does not
        // act: the same failure, on the ReconcilePlugin, either way.
        let account_failure = match self.account(&identity).await {
            Ok(failure) => failure,
            Err(error) => {
                warn!(plugin = name, %error, "looking up the ServiceAccount failed; retrying");
                return Next::Retry;
            }
        };
        let account_exists = account_failure.is_none();
        let fingerprint = fingerprint(&rp);
        let current = self
            .installed
            .lock()
            .expect("lifecycle lock poisoned")
            .get(name)
            .map(|i| (i.fingerprint, i.plugin.clone()));
        let current_is_none = current.is_none();
        let plan = rollout::Plan::of(rp.spec.rollout.as_ref());
        let restore = plan
            .as_ref()
            .and_then(|_| rollout_status::stable_to_restore(&rp));
        let failure = match current {
            _ if !account_exists => account_failure.clone(),
            Some((f, _)) if f == fingerprint => {
                self.end_rollout(name, "spec.source names the stable digest again")
                    .await;
                None
            }
            // A new digest under a progressive rollout becomes a candidate beside the stable
            // revision; the same digest with another config or limits applies at once.
            Some((_, stable)) if plan.is_some() && !same_digest(&stable, &rp.spec.source) => {
                let plan = plan.as_ref().expect("checked above");
                self.roll(name, &rp, &object, &identity, fingerprint, plan)
                    .await
                    .err()
            }
            // Restarted mid-rollout: the stable revision serves first, the candidate follows.
            None if restore.is_some() => {
                let source = restore.as_ref().expect("checked above");
                let mut stable_rp = rp.clone();
                stable_rp.spec.source = source.clone();
                self.install(
                    name,
                    &rp,
                    &identity,
                    spec::fingerprint(&stable_rp),
                    None,
                    source,
                )
                .await
                .err()
            }
            current => {
                self.end_rollout(name, "the spec asks for an immediate rollout")
                    .await;
                let source = rp.spec.source.clone();
                self.install(
                    name,
                    &rp,
                    &identity,
                    fingerprint,
                    current.map(|(_, p)| p),
                    &source,
                )
                .await
                .err()
            }
        };
        if let Some(controller) = self.supervisor.controller(name) {
            // Without its ServiceAccount a plugin does not act, not even with old code.
            if rp.spec.suspend || !account_exists {
                controller.suspend().await;
                // Its parents say so, rather than Synced=True beside a spec being ignored.
                if rp.spec.suspend && leading {
                    controller.show_paused(name).await;
                }
            } else {
                controller.resume().await;
                controller.wake_paused();
            }
        }
        let serving = self
            .installed
            .lock()
            .expect("lifecycle lock poisoned")
            .get(name)
            .map(|i| (i.plugin.clone(), i.obtained));
        let state = match (&failure, &serving) {
            (Some(_), _) => "failed",
            (None, Some(_)) if rp.spec.suspend => "suspended",
            (None, Some(_)) => "ready",
            (None, None) => "loading",
        };
        self.states
            .lock()
            .expect("lifecycle lock poisoned")
            .insert(name.to_owned(), state);
        let authorized = if let Some(failure) = &account_failure {
            status::Authorized::NoAccount {
                reason: failure.reason,
                message: failure.message.clone(),
            }
        } else if serving.is_some() {
            status::Authorized::Denied(self.denied(name, &rp, &identity).await)
        } else {
            status::Authorized::Unknown
        };
        let wanted = status::compose(
            &rp,
            &object,
            serving.as_ref(),
            failure.as_ref(),
            &authorized,
        );
        let wanted = self.with_rollout(name, &rp, wanted);
        // Counted only where the counts are written: a standby's count would keep verdicts
        // on parents it never uses (the tally's weak pointers hold their allocations).
        let standing = leading
            .then(|| self.supervisor.controller(name)?.standing())
            .flatten();
        let wanted = parents::with_parents(wanted, standing, &object);
        if leading && let Err(error) = self.writer.status(&object, &wanted).await {
            warn!(plugin = name, %error, "writing the ReconcilePlugin status failed; retrying");
            return Next::Retry;
        }
        match failure {
            // A rollout in progress, or one to take up after a restart, is looked at again soon.
            None if self.rolling(name) || restore.is_some() && current_is_none => {
                Next::RequeueAfter(progress::TICK)
            }
            // Looked at again so the Authorized condition follows grants and revocations.
            None => match authorized {
                // Just past the denials' lifetime, so the next look asks again.
                status::Authorized::Denied(denied) if !denied.is_empty() => {
                    Next::RequeueAfter(DENIED_TTL + Duration::from_secs(1))
                }
                _ => Next::RequeueAfter(AUTHORIZATION_REFRESH),
            },
            Some(f) => {
                if f.reason == "Conflict" {
                    self.conflicts
                        .lock()
                        .expect("lifecycle lock poisoned")
                        .insert(name.to_owned());
                }
                warn!(plugin = name, reason = f.reason, error = %f.message,
                      serving = serving.is_some(), "plugin not installed");
                // Waiting for something to appear (a CRD, a grant, a ServiceAccount): looked
                // at again every 10 s rather than with a growing backoff.
                if f.waits_on_cluster || f.stage == Stage::Account {
                    Next::RequeueAfter(KIND_POLL)
                } else {
                    Next::Retry
                }
            }
        }
    }

    /// Why the plugin cannot act as its ServiceAccount, if it cannot: the host may not
    /// impersonate it (asked of the API server, as the host), or it does not exist.
    async fn account(&self, identity: &Identity) -> Result<Option<Failure>, kube::Error> {
        let who = identity.to_string();
        let may_impersonate = crate::identity::access::self_may(
            &self.client,
            &Question::new("impersonate", "", "serviceaccounts", &identity.namespace),
            &identity.name,
        )
        .await?;
        if !may_impersonate {
            return Ok(Some(Failure::cannot_impersonate(&who)));
        }
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &identity.namespace);
        match api.get_metadata_opt(&identity.name).await {
            Ok(Some(_)) => Ok(None),
            Ok(None) => Ok(Some(Failure::no_account(&who))),
            Err(kube::Error::Api(s)) if s.code == 403 => {
                Ok(Some(Failure::cannot_impersonate(&who)))
            }
            Err(e) => Err(e),
        }
    }

    /// What of what the serving plugin needs its ServiceAccount may not do (answers cached):
    /// asked in each namespace it reconciles parents in.
    async fn denied(&self, name: &str, rp: &ReconcilePlugin, identity: &Identity) -> Vec<Question> {
        let Some(revision) = self.supervisor.controller(name).and_then(|c| c.current()) else {
            return Vec::new();
        };
        let (parent, children, reads) = revision.kinds();
        let mut denied = Vec::new();
        let rules = rbac::rules(&parent, &children, &reads);
        let namespaces = spec::namespaces_asked(rp, self.namespace.as_deref());
        for question in rbac::questions(&rules, &namespaces) {
            match self.access.check(identity, &question).await {
                Ok(d) if d.allowed => {}
                Ok(_) => denied.push(question),
                Err(error) => {
                    warn!(plugin = name, %error, %question, "asking whether the plugin may failed");
                }
            }
        }
        denied
    }

    /// Loads the spec's component (from `source`, the spec's own or an earlier revision's) and
    /// makes it serve every parent.
    async fn install(
        &self,
        name: &str,
        rp: &ReconcilePlugin,
        identity: &Identity,
        fingerprint: u64,
        current: Option<Plugin>,
        source: &api::Source,
    ) -> Result<(), Failure> {
        let (spec, obtained) = self.load_spec(name, rp, identity, current, source).await?;
        let parent = KindRef::from(&rp.spec.parent);
        let plugin = spec.plugin.clone();
        self.supervisor
            .apply(name, spec)
            .await
            .map_err(|e| Failure::supervisor(&e, &parent))?;
        self.installed
            .lock()
            .expect("lifecycle lock poisoned")
            .insert(
                name.to_owned(),
                Installed {
                    fingerprint,
                    plugin,
                    obtained,
                    source: source.clone(),
                },
            );
        self.conflicts
            .lock()
            .expect("lifecycle lock poisoned")
            .remove(name);
        Ok(())
    }

    /// Loads the component `source` names (reusing `current`'s compiled code when the digest
    /// is the same), checks that it reconciles `spec.parent`, and makes the revision spec of it.
    async fn load_spec(
        &self,
        name: &str,
        rp: &ReconcilePlugin,
        identity: &Identity,
        current: Option<Plugin>,
        source: &api::Source,
    ) -> Result<(Spec, Obtained), Failure> {
        let parent = KindRef::from(&rp.spec.parent);
        let limits = limits_of(rp, &self.defaults)?;
        let digest_hex = source.digest.trim_start_matches("sha256:");
        let (plugin, obtained) = match current {
            // Same code, other limits: reuse the compiled component.
            Some(plugin) if plugin.digest() == digest_hex => {
                let plugin = if *plugin.limits() == limits {
                    plugin
                } else {
                    plugin.with_limits(limits).map_err(|e| Failure::load(&e))?
                };
                (plugin, Obtained::Cached)
            }
            _ => {
                let origin = format!("ReconcilePlugin {name}");
                // What went over the compile budget goes over it again: not compiled again,
                // not after a restart either, until the digest or the budget changes.
                if let Some(failure) =
                    status::over_budget(rp, digest_hex, self.loader.compile_budget())
                {
                    info!(plugin = name, digest = %source.digest,
                          "not compiled again: it went over the same compile budget before");
                    return Err(failure);
                }
                let namespace = &rp.spec.service_account_ref.namespace;
                let verified = rp.status.as_ref().and_then(|s| s.active_digest.as_deref())
                    == Some(source.digest.as_str());
                self.loader
                    .load(&origin, source, namespace, limits, verified)
                    .await?
            }
        };
        let info = plugin.info();
        if !same_kind(&info.parent, &parent) {
            return Err(Failure::new(
                Stage::Start,
                "ParentMismatch",
                format!(
                    "the component is plugin {} {}, which reconciles {}, but spec.parent is {parent}",
                    info.name, info.version, info.parent
                ),
            ));
        }
        let spec = Spec {
            plugin,
            config: rp.spec.config.clone().unwrap_or_else(|| json!({})),
            concurrency: rp
                .spec
                .limits
                .as_ref()
                .and_then(|l| l.concurrent_reconciles)
                .map_or(self.defaults.concurrency, usize::from),
            identity: Some(identity.clone()),
            parent_selector: spec::selector_of(rp)?,
            parent_namespaces: spec::namespaces_of(rp),
            resync: rp.spec.resync_period.map(Duration::from),
            ignore_parent_status: rp.spec.ignore_parent_status_changes,
            adopt: spec::adoption_of(rp)?,
            decorator: spec::decorator_of(rp)?,
        };
        Ok((spec, obtained))
    }

    async fn uninstall(&self, name: &str, rp: &ReconcilePlugin, object: &Value) -> Next {
        let running = self
            .installed
            .lock()
            .expect("lifecycle lock poisoned")
            .get(name)
            .map(|i| i.plugin.info().name.clone());
        self.forget(name).await;
        // The plugin's name: from what ran, else from the status an earlier host wrote (a
        // plugin that ran before a restart and no longer loads still left finalizers).
        let plugin_name =
            running.or_else(|| rp.status.as_ref()?.plugin.as_ref().map(|p| p.name.clone()));
        if let Some(plugin_name) = plugin_name {
            let parent = KindRef::from(&rp.spec.parent);
            match uninstall::release_everywhere(
                &self.client,
                &parent,
                &crate::model::finalizer_name(&plugin_name),
                &uninstall::where_parents_are(
                    rp.spec.namespaces.as_deref(),
                    self.namespace.as_deref(),
                ),
            )
            .await
            {
                Ok(released) => {
                    info!(plugin = name, released, "parents released");
                    self.writer
                        .event(object, &events::uninstalled(released))
                        .await;
                }
                Err(error) => {
                    warn!(plugin = name, %error, "releasing the parents failed; retrying");
                    return Next::Retry;
                }
            }
        }
        if has_finalizer(object)
            && let Err(error) = self.writer.finalizer(object, false).await
        {
            warn!(plugin = name, %error, "removing the uninstall finalizer failed; retrying");
            return Next::Retry;
        }
        info!(plugin = name, "uninstalled");
        Next::Done
    }

    /// Stops what `name` ran, and looks again at plugins refused for a conflict with it.
    /// Whether this host runs the ReconcilePlugin `name` now.
    fn is_installed(&self, name: &str) -> bool {
        self.installed
            .lock()
            .expect("lifecycle lock poisoned")
            .contains_key(name)
    }

    async fn forget(&self, name: &str) {
        self.forget_rollout(name);
        let removed = self
            .installed
            .lock()
            .expect("lifecycle lock poisoned")
            .remove(name);
        self.states
            .lock()
            .expect("lifecycle lock poisoned")
            .remove(name);
        self.conflicts
            .lock()
            .expect("lifecycle lock poisoned")
            .remove(name);
        if self.supervisor.remove(name).await || removed.is_some() {
            let waiting: Vec<String> = self
                .conflicts
                .lock()
                .expect("lifecycle lock poisoned")
                .iter()
                .cloned()
                .collect();
            for other in waiting {
                self.queue.add(ObjectKey::new("", other), Priority::Normal);
            }
        }
    }

    fn publish_states(&self) {
        let states = self.states.lock().expect("lifecycle lock poisoned");
        let mut counts: Vec<(&str, i64)> = Vec::new();
        for state in states.values() {
            match counts.iter_mut().find(|(s, _)| s == state) {
                Some((_, n)) => *n += 1,
                None => counts.push((state, 1)),
            }
        }
        self.metrics.plugin_states(&counts);
    }
}

/// Whether `plugin` is the component `source` pins.
fn same_digest(plugin: &Plugin, source: &api::Source) -> bool {
    source.digest.trim_start_matches("sha256:") == plugin.digest()
}

fn has_finalizer(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == UNINSTALL_FINALIZER))
}
