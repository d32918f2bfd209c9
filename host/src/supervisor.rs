//! The supervisor: owns the running controllers and adds, replaces and removes them while the
//! host runs.
//!
//! Each controller is claimed by an *owner*: a ReconcilePlugin (by name) in the dynamic mode, a
//! `--plugin` file in the static mode. The supervisor keeps the rules that make plugins
//! independent of each other:
//! - one controller per parent kind: a second owner for a kind is refused;
//! - one owner per plugin name: the name is the field manager, the finalizer and the metrics
//!   label, so two plugins sharing it would take over each other's fields and finalizers;
//! - an owner's plugin keeps its name and parent kind across versions: a renamed plugin would
//!   leave its old finalizer on every parent, where nothing would ever remove it.
//!
//! [`Supervisor::apply`] installs or upgrades: it prepares the new generation beside the running
//! one, waits (bounded) for its caches, and swaps; on any failure the running generation, if
//! any, keeps serving untouched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::info;

use crate::cache::{DiscoveryError, GroupKind};
use crate::controller::{Context, Controller, Spec, short};
use crate::model::KindRef;

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
    /// A kind the plugin uses is not served by the API server.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
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
    /// The running controller now serves the new generation; `from` is the digest it replaced.
    Upgraded {
        /// The digest of the replaced generation.
        from: String,
    },
}

/// The running controllers by owner.
pub struct Supervisor {
    ctx: Context,
    entries: Mutex<HashMap<String, Arc<Controller>>>,
    sync_timeout: Duration,
}

impl Supervisor {
    /// A supervisor starting controllers on `ctx`, waiting at most `sync_timeout` for a new
    /// generation's caches.
    pub fn new(ctx: Context, sync_timeout: Duration) -> Self {
        Self {
            ctx,
            entries: Mutex::new(HashMap::new()),
            sync_timeout,
        }
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
        let (controller, fresh) = self.claim(owner, &info.name, &parent)?;
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
    ) -> Result<(Arc<Controller>, bool), SupervisorError> {
        let mut entries = self.entries.lock().expect("supervisor lock poisoned");
        for (other, controller) in entries.iter().filter(|(o, _)| *o != owner) {
            if controller.parent() == parent {
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
            return Ok((controller.clone(), false));
        }
        let controller = Arc::new(Controller::new(name, parent.clone(), self.ctx.clone()));
        entries.insert(owner.to_owned(), controller.clone());
        Ok((controller, true))
    }

    async fn prepare_and_swap(
        &self,
        controller: &Controller,
        spec: Spec,
    ) -> Result<Option<Arc<crate::controller::Generation>>, SupervisorError> {
        let generation = controller.prepare(spec).await?;
        if tokio::time::timeout(self.sync_timeout, generation.wait_synced())
            .await
            .is_err()
        {
            return Err(SupervisorError::NotSynced {
                kinds: generation.unsynced(),
                after: self.sync_timeout,
            });
        }
        Ok(controller.swap(generation).await)
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

    /// Whether no controller runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The owner of the controller for a parent kind, if any.
    pub fn owner_of(&self, parent: &KindRef) -> Option<String> {
        let parent = GroupKind::from(parent);
        self.entries
            .lock()
            .expect("supervisor lock poisoned")
            .iter()
            .find(|(_, c)| *c.parent() == parent)
            .map(|(o, _)| o.clone())
    }
}
