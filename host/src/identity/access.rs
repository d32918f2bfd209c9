//! Whether a ServiceAccount may do something, as the API server's authorizers say: a
//! SubjectAccessReview per question, answers cached with kube-apiserver's webhook-authorizer
//! lifetimes (allowed 5 min, denied 30 s), so a grant takes effect within half a minute and a
//! revocation within five.
//!
//! Reads a plugin makes during a call are answered from the cache only ([`Access::cached`]): a
//! call runs under a deadline and must not wait on the network. What is not known yet is asked
//! between calls ([`Access::check`]).
//!
//! Each ServiceAccount's reviews are paced ([`REVIEWS`]): a plugin that asks about ever new
//! namespaces waits for its own answers and does not slow the API server for every other plugin.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::Identity;
use crate::bucket::{Rate, Tokens};
use crate::metrics::Metrics;

/// How long an allowed answer is trusted (kube-apiserver's
/// `--authorization-webhook-cache-authorized-ttl` default).
pub const ALLOWED_TTL: Duration = Duration::from_secs(300);

/// How long a denied answer is trusted (`--authorization-webhook-cache-unauthorized-ttl`).
pub const DENIED_TTL: Duration = Duration::from_secs(30);

/// Bound on cached answers; past it, the least recently used goes (an expired answer is never
/// used, so it goes first). A plugin that asks about ever new namespaces cannot grow the cache or
/// make an insert cost more than a constant.
pub const CAPACITY: usize = 10_000;

/// How many SubjectAccessReviews one ServiceAccount's questions may cost. A steady fleet asks
/// again only what it used and saw expire: a plugin whose parents live in a thousand namespaces,
/// with three questions each, needs ten a second. One that asked about a thousand new namespaces
/// per call made 700 a second and slowed every other plugin threefold; now it waits for its own.
pub const REVIEWS: Rate = Rate {
    rate: 50.0,
    burst: 500.0,
};

/// One question: may the ServiceAccount `verb` this resource (in this namespace; empty for
/// every namespace or a cluster-scoped resource)?
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Question {
    /// `get`, `list`, `watch`, `create`, `patch`, `update`, `delete`.
    pub verb: String,
    /// The API group, empty for the core group.
    pub group: String,
    /// The resource (plural), with `/subresource` when it is one.
    pub resource: String,
    /// The namespace, or empty.
    pub namespace: String,
}

impl Question {
    /// A question.
    pub fn new(verb: &str, group: &str, resource: &str, namespace: &str) -> Self {
        Self {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// The same question for every namespace.
    pub fn cluster_wide(&self) -> Self {
        Self {
            namespace: String::new(),
            ..self.clone()
        }
    }
}

impl std::fmt::Display for Question {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        let (resource, sub) = match self.resource.split_once('/') {
            Some((r, s)) => (r, format!("/{s}")),
            None => (self.resource.as_str(), String::new()),
        };
        let scope = if self.namespace.is_empty() {
            "in all namespaces".to_owned()
        } else {
            format!("in namespace {}", self.namespace)
        };
        write!(f, "{} {resource}{group}{sub} {scope}", self.verb)
    }
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether it is allowed.
    pub allowed: bool,
    /// The authorizer's reason, when it gave one.
    pub reason: String,
}

/// The cached answers of the host's SubjectAccessReviews.
pub struct Access {
    client: kube::Client,
    answers: Mutex<lru::LruCache<(Identity, Question), (Decision, Instant)>>,
    /// Each ServiceAccount's review budget.
    budgets: Mutex<HashMap<Identity, Tokens>>,
    metrics: Option<Arc<Metrics>>,
}

impl Access {
    /// Answers asked with `client` (which needs `create` on subjectaccessreviews).
    pub fn new(client: kube::Client) -> Self {
        Self::with_capacity(client, CAPACITY)
    }

    /// Counts the reviews that waited for their ServiceAccount's budget in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Answers asked with `client`, at most `capacity` of them kept.
    pub fn with_capacity(client: kube::Client, capacity: usize) -> Self {
        Self {
            client,
            answers: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
            budgets: Mutex::new(HashMap::new()),
            metrics: None,
        }
    }

    /// The cached answer, if it is still fresh.
    pub fn cached(&self, who: &Identity, question: &Question) -> Option<Decision> {
        let mut answers = self.answers.lock().expect("access lock poisoned");
        let (decision, at) = answers.get(&(who.clone(), question.clone()))?;
        let ttl = if decision.allowed {
            ALLOWED_TTL
        } else {
            DENIED_TTL
        };
        (at.elapsed() < ttl).then(|| decision.clone())
    }

    /// Whether `who` may read with `verb` in `namespace`: allowed for every namespace, or in
    /// this one. `None` while neither answer is known.
    pub fn may(&self, who: &Identity, question: &Question) -> Option<Decision> {
        let all = self.cached(who, &question.cluster_wide());
        if all.as_ref().is_some_and(|d| d.allowed) || question.namespace.is_empty() {
            return all;
        }
        self.cached(who, question)
    }

    /// The answer, from the cache or a SubjectAccessReview.
    pub async fn check(
        &self,
        who: &Identity,
        question: &Question,
    ) -> Result<Decision, kube::Error> {
        if let Some(decision) = self.cached(who, question) {
            return Ok(decision);
        }
        let wait = self.budget(who, Instant::now());
        if !wait.is_zero() {
            if let Some(metrics) = &self.metrics {
                metrics.review_paced(&who.to_string());
            }
            tracing::debug!(service_account = %who, ?wait, %question, "access reviews paced");
            tokio::time::sleep(wait).await;
            // Another caller may have asked the same meanwhile.
            if let Some(decision) = self.cached(who, question) {
                return Ok(decision);
            }
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(who.user()),
                groups: Some(who.groups()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(question.verb.clone()),
                    group: Some(question.group.clone()),
                    resource: Some(
                        question
                            .resource
                            .split_once('/')
                            .map_or(question.resource.as_str(), |(r, _)| r)
                            .to_owned(),
                    ),
                    subresource: question.resource.split_once('/').map(|(_, s)| s.to_owned()),
                    namespace: (!question.namespace.is_empty()).then(|| question.namespace.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let status = answer.status.unwrap_or_default();
        let decision = Decision {
            allowed: status.allowed,
            reason: status.reason.unwrap_or_default(),
        };
        self.remember(who, question, decision.clone());
        Ok(decision)
    }

    /// Takes one review from `who`'s budget; how long to wait before making it.
    fn budget(&self, who: &Identity, now: Instant) -> Duration {
        self.budgets
            .lock()
            .expect("access lock poisoned")
            .entry(who.clone())
            .or_insert_with(|| Tokens::full(&REVIEWS, now))
            .reserve(&REVIEWS, now)
    }

    /// Keeps an answer, dropping the least recently used one when full.
    fn remember(&self, who: &Identity, question: &Question, decision: Decision) {
        self.answers
            .lock()
            .expect("access lock poisoned")
            .put((who.clone(), question.clone()), (decision, Instant::now()));
    }

    /// Drops every answer about an identity `affected` names (its RBAC changed); how many.
    pub fn forget(&self, affected: impl Fn(&Identity) -> bool) -> usize {
        let mut answers = self.answers.lock().expect("access lock poisoned");
        let stale: Vec<_> = answers
            .iter()
            .filter(|((who, _), _)| affected(who))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &stale {
            answers.pop(key);
        }
        stale.len()
    }

    #[cfg(test)]
    /// How many answers are kept.
    pub fn len(&self) -> usize {
        self.answers.lock().expect("access lock poisoned").len()
    }

    /// Whether `who` may, asking whatever is not cached: every namespace first, then this one.
    pub async fn check_read(
        &self,
        who: &Identity,
        question: &Question,
    ) -> Result<Decision, kube::Error> {
        let all = self.check(who, &question.cluster_wide()).await?;
        if all.allowed || question.namespace.is_empty() {
            return Ok(all);
        }
        self.check(who, question).await
    }
}

/// Whether the host itself (the identity of `client`) may do what `question` asks, to the
/// object `name`: a SelfSubjectAccessReview, which any authenticated user may make.
pub async fn self_may(
    client: &kube::Client,
    question: &Question,
    name: &str,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(question.verb.clone()),
                group: Some(question.group.clone()),
                resource: Some(question.resource.clone()),
                namespace: (!question.namespace.is_empty()).then(|| question.namespace.clone()),
                name: (!name.is_empty()).then(|| name.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_cache_should_stay_bounded_and_keep_what_is_used() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let access = Access::with_capacity(kube::Client::try_from(config).unwrap(), 3);
        let who = Identity::new("p", "a");
        let no = Decision {
            allowed: false,
            reason: String::new(),
        };
        let q = |ns: &str| Question::new("get", "", "secrets", ns);
        for n in 0..1000 {
            access.remember(&who, &q(&format!("new-{n}")), no.clone());
        }
        assert_eq!(access.len(), 3, "a plugin asking about ever new namespaces");
        for ns in ["x", "y", "z"] {
            access.remember(&who, &q(ns), no.clone());
        }
        assert!(
            access.cached(&who, &q("x")).is_some(),
            "used: now the most recent"
        );
        access.remember(&who, &q("w"), no.clone());
        assert!(
            access.cached(&who, &q("x")).is_some(),
            "what was used stays"
        );
        assert!(
            access.cached(&who, &q("y")).is_none(),
            "the least recently used went"
        );
        assert!(access.cached(&who, &q("w")).is_some());
    }

    #[tokio::test]
    async fn each_service_account_should_have_its_own_review_budget() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let access = Access::new(kube::Client::try_from(config).unwrap());
        let (greedy, bystander) = (Identity::new("p", "greedy"), Identity::new("q", "other"));
        let now = Instant::now();
        let burst = REVIEWS.burst as usize;
        for n in 0..burst {
            assert_eq!(access.budget(&greedy, now), Duration::ZERO, "review {n}");
        }
        let waits: Vec<_> = (0..100).map(|_| access.budget(&greedy, now)).collect();
        assert_eq!(waits[0], Duration::from_millis(20));
        assert_eq!(waits[99], Duration::from_secs(2), "queued at 50 a second");
        assert_eq!(
            access.budget(&bystander, now),
            Duration::ZERO,
            "another plugin's reviews do not wait"
        );
    }

    #[test]
    fn questions_should_read_like_rbac() {
        let q = Question::new("list", "apps", "deployments", "shop");
        assert_eq!(q.to_string(), "list deployments.apps in namespace shop");
        let q = Question::new("patch", "example.com", "widgets/status", "");
        assert_eq!(
            q.to_string(),
            "patch widgets.example.com/status in all namespaces"
        );
        assert_eq!(
            Question::new("get", "", "secrets", "a")
                .cluster_wide()
                .namespace,
            ""
        );
    }
}
