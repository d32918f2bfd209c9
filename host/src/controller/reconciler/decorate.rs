//! A decorator's share of the reconcile: its children are told apart from those the parent's
//! owner and other decorators attach to the same object, and an object that leaves its
//! selection loses what it attached.

use serde_json::Value;
use tracing::{debug, info, warn};

use super::Reconciler;
use crate::cache::{Cached, ObjectKey};
use crate::controller::workers::Next;
use crate::model;
use crate::planner;

impl Reconciler {
    /// Whether `child`, controlled by the parent, is this plugin's: a decorator's carry its
    /// name in [`model::DECORATOR_LABEL`], the owner's carry no such label.
    pub(super) fn is_mine(&self, child: &Cached) -> bool {
        let label = child.meta.label(model::DECORATOR_LABEL);
        if self.decorator {
            label == Some(self.plugin.info().name.as_str())
        } else {
            label.is_none()
        }
    }

    /// A decorated object that left the decorator's selection loses what it attached (its
    /// children, deleted) and its finalizer, without a call: the object is no longer the
    /// plugin's to decorate. One it never decorated gets no write at all.
    pub(super) async fn undecorate(&self, key: &ObjectKey, parent: &Value) -> Next {
        let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
        let uid = parent["metadata"]["uid"].as_str().unwrap_or("");
        let observed: Vec<Value> = match self.children_of(namespace, uid).await {
            Ok(children) => children.iter().map(|c| c.observed()).collect(),
            Err(error) => {
                warn!(plugin = %self.plugin.info().name, parent = %key, %error,
                      "fetching the children, which another replica owned until now, failed; retrying");
                return Next::Retry;
            }
        };
        let mut plan = planner::plan(
            self.plugin.info(),
            &self.status_fields(),
            parent,
            &model::Desired::default(),
            &observed,
            &model::now(),
        );
        plan.status = None;
        plan.finalizer = self
            .plugin
            .info()
            .holds_finalizer(parent)
            .then_some(planner::FinalizerAction::Remove);
        if plan.is_noop() {
            debug!(plugin = %self.plugin.info().name, parent = %key, "not selected");
            return Next::Done;
        }
        match self.applier.apply(parent, &plan, |_| None).await {
            Ok(outcome) => {
                self.observe(outcome.written);
                info!(plugin = %self.plugin.info().name, parent = %key, children = observed.len(),
                      "no longer decorated: removed what the plugin attached and its finalizer");
                Next::Done
            }
            Err(error) => self.apply_failed(key, parent, error).await,
        }
    }
}
