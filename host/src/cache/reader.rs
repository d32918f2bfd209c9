//! Answers a plugin's `get` and `list` from the informers of the kinds it declared, and only
//! where its ServiceAccount could read through the API server.
//!
//! The caches are filled with the host's rights, which are wider than any plugin's; a
//! [`ReadGuard`] makes each read ask what the plugin's own identity may do ([`Access`], answers
//! cached between calls). A read no answer is known for yet is refused, noted, and asked after
//! the call, and the parent is reconciled again once the answer is in: a call runs under a
//! deadline and never waits on the network.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::informer::Informer;
use super::store::GroupKind;
use crate::identity::Identity;
use crate::identity::access::{Access, Question};
use crate::model::KindRef;
use crate::runtime::{ObjectReader, Refused};
use crate::selector::Selector;

/// A plugin's view of the caches: only the kinds it declared it reads.
pub struct CacheReader {
    stores: HashMap<GroupKind, Arc<Informer>>,
    guard: Option<ReadGuard>,
}

/// Whose reads these are, and where the answers come from.
#[derive(Clone)]
pub struct ReadGuard {
    /// The plugin's ServiceAccount.
    pub identity: Identity,
    /// The host's access reviews.
    pub access: Arc<Access>,
    /// The namespaces the plugin works in (its ReconcilePlugin's `spec.namespaces`; `None`:
    /// only the parent's). A read elsewhere needs a grant in every namespace, so it is asked
    /// only that: one review per kind and verb, however many namespaces a plugin tries.
    pub namespaces: Option<BTreeSet<String>>,
}

impl ReadGuard {
    /// Whether the plugin works in `namespace` when reconciling a parent in `home`.
    fn covers(&self, namespace: &str, home: &str) -> bool {
        namespace.is_empty()
            || namespace == home
            || self
                .namespaces
                .as_ref()
                .is_some_and(|n| n.contains(namespace))
    }
}

impl CacheReader {
    /// A reader over these informers; with a guard, limited to what the identity may read.
    pub fn new(
        informers: impl IntoIterator<Item = Arc<Informer>>,
        guard: Option<ReadGuard>,
    ) -> Self {
        Self {
            stores: informers.into_iter().map(|i| (i.group_kind(), i)).collect(),
            guard,
        }
    }

    /// The guard, if reads are limited to an identity.
    pub fn guard(&self) -> Option<&ReadGuard> {
        self.guard.as_ref()
    }

    /// Asks, before a call, what the identity may read in `namespace` (every read kind, `get`
    /// and `list`), so the call finds the answers cached. Failures to ask are left for the
    /// call to meet as unknown.
    pub async fn warm(&self, namespace: &str) {
        let Some(guard) = &self.guard else {
            return;
        };
        for informer in self.stores.values() {
            let resource = &informer.kind().resource;
            let namespace = if informer.kind().namespaced {
                namespace
            } else {
                ""
            };
            for verb in ["get", "list"] {
                let question = Question::new(verb, &resource.group, &resource.plural, namespace);
                if let Err(error) = guard.access.check_read(&guard.identity, &question).await {
                    tracing::warn!(%error, %question, "asking the API server whether a plugin may read failed");
                }
            }
        }
    }

    /// Asks what could not be answered during a call; whether any of it is now known (the
    /// call would see more, or be told why not, if it ran again).
    pub async fn answer(&self, questions: Vec<Question>) -> bool {
        let Some(guard) = &self.guard else {
            return false;
        };
        let mut known = false;
        for question in questions {
            match guard.access.check_read(&guard.identity, &question).await {
                Ok(_) => known = true,
                Err(error) => {
                    tracing::warn!(%error, %question, "asking the API server whether a plugin may read failed");
                }
            }
        }
        known
    }

    /// A reader for one call about a parent in namespace `home` (empty: cluster-scoped),
    /// which notes the questions it could not answer.
    pub fn for_call(self: &Arc<Self>, home: &str) -> CallReader {
        CallReader {
            reader: self.clone(),
            home: home.to_owned(),
            unanswered: Mutex::new(Vec::new()),
        }
    }
}

/// The reads of one call.
pub struct CallReader {
    reader: Arc<CacheReader>,
    /// The parent's namespace.
    home: String,
    unanswered: Mutex<Vec<Question>>,
}

impl CallReader {
    /// The questions the call's reads needed and no answer was cached for.
    pub fn unanswered(&self) -> Vec<Question> {
        std::mem::take(&mut *self.unanswered.lock().expect("reader lock poisoned"))
    }

    fn permit(&self, informer: &Informer, verb: &str, namespace: &str) -> Result<(), Refused> {
        if informer.kind().namespaced && !informer.covers(namespace) {
            let watched: Vec<&str> = informer
                .namespaces()
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect();
            let plural = &informer.kind().resource.plural;
            return Err(Refused(if watched.is_empty() {
                format!(
                    "the host watches {plural} for this plugin in no namespace: the ReconcilePlugin's spec.namespaces has none in common with the host's --namespace"
                )
            } else {
                format!(
                    "the host watches {plural} for this plugin only in its namespaces ({}); {namespace} is not one of them (the ReconcilePlugin's spec.namespaces)",
                    watched.join(", ")
                )
            }));
        }
        let Some(guard) = &self.reader.guard else {
            return Ok(());
        };
        let resource = &informer.kind().resource;
        let namespace = if informer.kind().namespaced {
            namespace
        } else {
            ""
        };
        let question = Question::new(verb, &resource.group, &resource.plural, namespace);
        match guard.access.may(&guard.identity, &question) {
            Some(d) if d.allowed => Ok(()),
            Some(d) => Err(Refused(format!(
                "ServiceAccount {} may not {question}{}",
                guard.identity,
                if d.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", d.reason)
                }
            ))),
            // Outside the plugin's namespaces only a grant in every namespace allows a read:
            // known to be missing, refused; else that is the one question asked.
            None if !guard.covers(&question.namespace, &self.home) => {
                let everywhere = question.cluster_wide();
                if guard.access.cached(&guard.identity, &everywhere).is_some() {
                    return Err(Refused(format!(
                        "ServiceAccount {} may not {question}: it is outside the plugin's namespaces, and it may not {everywhere}",
                        guard.identity
                    )));
                }
                self.unanswered
                    .lock()
                    .expect("reader lock poisoned")
                    .push(everywhere);
                Err(Refused(format!(
                    "whether ServiceAccount {} may {question} is not known yet; the host asks the API server and reconciles again",
                    guard.identity
                )))
            }
            None => {
                let refused = Refused(format!(
                    "whether ServiceAccount {} may {question} is not known yet; the host asks the API server and reconciles again",
                    guard.identity
                ));
                self.unanswered
                    .lock()
                    .expect("reader lock poisoned")
                    .push(question);
                Err(refused)
            }
        }
    }
}

impl ObjectReader for CallReader {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, Refused> {
        let Some(informer) = self.reader.stores.get(&GroupKind::from(kind)) else {
            return Ok(None);
        };
        self.permit(informer, "get", namespace)?;
        Ok(informer.store().get(namespace, name).map(|o| o.json()))
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<String>, Refused> {
        let Some(informer) = self.reader.stores.get(&GroupKind::from(kind)) else {
            return Ok(Vec::new());
        };
        self.permit(informer, "list", namespace)?;
        Ok(informer
            .store()
            .list(namespace, selector)
            .iter()
            .map(|o| o.json())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::ResolvedKind;

    fn config_maps_in(namespaces: &[&str]) -> Arc<CacheReader> {
        let informer = Informer::new(
            ResolvedKind {
                resource: kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(
                    &(),
                ),
                namespaced: true,
                has_status: false,
            },
            Some(namespaces.iter().map(|n| n.to_string()).collect()),
        );
        Arc::new(CacheReader::new([Arc::new(informer)], None))
    }

    #[test]
    fn a_read_outside_a_confined_cache_should_be_refused_with_the_reason() {
        let kind = KindRef::new("v1", "ConfigMap");
        let reader = config_maps_in(&["a"]).for_call("a");
        assert_eq!(reader.get(&kind, "a", "x"), Ok(None), "inside: not there");
        let refused = reader.get(&kind, "b", "x").unwrap_err().0;
        assert!(
            refused.contains("only in its namespaces (a); b is not one of them"),
            "{refused}"
        );
        let nowhere = config_maps_in(&[]).for_call("a");
        let refused = nowhere.get(&kind, "a", "x").unwrap_err().0;
        assert!(refused.contains("in no namespace"), "{refused}");
    }
}
