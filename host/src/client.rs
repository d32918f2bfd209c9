//! The host's Kubernetes client: one for the whole process (plugins' impersonating clients are
//! built on it), named in the API server's audit log, retrying throttled requests as the server
//! asks, and counting every response the server gives.
//!
//! kube's default client already retries 429, 503 and 504 with backoff, honouring
//! `Retry-After` ([`RetryPolicy::server_retry`]). Those retries happen inside the client, so the
//! host would never see that the API server throttled it. The host therefore builds the client
//! without kube's retry layer and puts the same policy back around a layer of its own that
//! counts each attempt by method and status, as client-go's `rest_client_requests_total` does.
//! A request throttled twice and then served shows as two 429s and one 200.
//!
//! The same layer bounds how long a request other than a watch may wait for its answer
//! (`--request-timeout`). kube-rs speaks HTTP/1.1 without keep-alive probes, so a response lost
//! on a connection that stalled without closing would otherwise keep a worker waiting for ever;
//! watches have their own bound (`--watch-timeout`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use http::Request;
use kube::client::Body;
use kube::client::retry::RetryPolicy;
use kube::config::KubeConfigOptions;
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

use crate::metrics::Metrics;

/// How the long-running host's client counts and bounds its requests.
#[derive(Clone)]
pub struct Instrumented {
    /// Where responses are counted.
    pub metrics: Arc<Metrics>,
    /// How long a request other than a watch may wait for its answer.
    pub request_timeout: Duration,
    /// With sharding: writes pass only while this replica's Lease is fresh.
    pub fence: Option<crate::shard::Fence>,
}

/// A client for the kubeconfig at `path`, or the usual resolution ($KUBECONFIG,
/// ~/.kube/config, in-cluster), naming itself `reconhost/<version>`. With `instrumented`, every
/// response is counted in `rest_client_requests_total` and requests are bounded in time.
pub async fn client(
    kubeconfig: Option<&Path>,
    instrumented: Option<Instrumented>,
) -> anyhow::Result<kube::Client> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig or in-cluster config")?,
    };
    // Named in the API server's audit log and request metrics, as kube-controller-manager and
    // controller-runtime managers are, so an operator can tell the host's requests apart.
    let Some(Instrumented {
        metrics,
        request_timeout,
        fence,
    }) = instrumented
    else {
        config
            .headers
            .push((http::header::USER_AGENT, user_agent(None)));
        return kube::Client::try_from(config).context("building the Kubernetes client");
    };
    let host = config
        .cluster_url
        .authority()
        .map(ToString::to_string)
        .unwrap_or_default();
    let namespace = config.default_namespace.clone();
    config.default_retry = false;
    let inner = kube::Client::try_from(config).context("building the Kubernetes client")?;
    let agent = user_agent(None);
    let counted = tower::service_fn(move |mut request: Request<Body>| {
        let (inner, metrics, host) = (inner.clone(), metrics.clone(), host.clone());
        let fenced = fence.as_ref().is_some_and(|f| !f.is_open()) && is_write(&request);
        // One User-Agent, the plugin revision's when one set it (see `acting_for`).
        request
            .headers_mut()
            .entry(http::header::USER_AGENT)
            .or_insert_with(|| agent.clone());
        crate::telemetry::propagate::inject(request.headers_mut());
        async move {
            let method = request.method().as_str().to_owned();
            if fenced {
                // Not sent, so not counted: the API server never saw it.
                return Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "this replica's shard Lease was not renewed within the renew deadline; it writes nothing until it rejoins",
                )) as tower::BoxError);
            }
            let response = if is_watch(&request) {
                inner.send(request).await
            } else {
                tokio::time::timeout(request_timeout, inner.send(request))
                    .await
                    .unwrap_or_else(|_| {
                        Err(kube::Error::Service(Box::new(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no answer within {} s", request_timeout.as_secs()),
                        ))))
                    })
            };
            let code = match &response {
                Ok(r) => r.status().as_u16().to_string(),
                // client-go's label for a request that got no answer.
                Err(_) => "<error>".to_owned(),
            };
            metrics.rest_request(&code, &method, &host);
            response.map_err(|e| -> tower::BoxError { Box::new(e) })
        }
    });
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::server_retry()))
        .service(counted);
    Ok(kube::Client::new(service, namespace))
}

/// Whether a request is a watch (`?watch=true`), which streams for as long as it lasts.
fn is_watch(request: &Request<Body>) -> bool {
    request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// Whether a request changes something: anything but GET, HEAD and OPTIONS, and but the
/// reviews (access, token), which are created only to ask a question.
fn is_write(request: &Request<Body>) -> bool {
    let path = request.uri().path();
    !matches!(
        *request.method(),
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    ) && !path.starts_with("/apis/authorization.k8s.io/")
        && !path.starts_with("/apis/authentication.k8s.io/")
}

/// The User-Agent of every request the host makes.
const USER_AGENT: &str = concat!("reconhost/", env!("CARGO_PKG_VERSION"));

/// `reconhost/<version> (<host name>)`: with several replicas, the audit log tells which one
/// made a request (the host name is the pod's name in a cluster); then `for`, if given.
fn user_agent(for_: Option<&str>) -> http::HeaderValue {
    let host = std::env::var("HOSTNAME")
        .ok()
        .map(|host| format!(" ({host})"))
        .unwrap_or_default();
    let suffix = for_.map(|f| format!(" {f}")).unwrap_or_default();
    http::HeaderValue::from_str(&format!("{USER_AGENT}{host}{suffix}"))
        .unwrap_or_else(|_| http::HeaderValue::from_static(USER_AGENT))
}

/// A client whose requests name, after the host, what they are made for (for a plugin's
/// revision: `plugin/<name>@<digest>`), so the audit log tells two revisions of one plugin
/// apart although both write under the same field manager. Through `base`'s connections;
/// `base` must be the host's instrumented client, which sets its own User-Agent only on
/// requests that carry none.
pub fn acting_for(base: &kube::Client, for_: &str) -> kube::Client {
    let agent = user_agent(Some(for_));
    let (base, namespace) = (base.clone(), base.default_namespace().to_owned());
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let (base, agent) = (base.clone(), agent.clone());
        async move {
            request
                .headers_mut()
                .insert(http::header::USER_AGENT, agent);
            base.send(request).await
        }
    });
    kube::Client::new(service, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, uri: &str) -> Request<Body> {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .expect("a request")
    }

    #[test]
    fn the_fence_should_hold_writes_and_let_reads_and_reviews_through() {
        for (method, uri) in [
            ("POST", "/api/v1/namespaces/a/configmaps"),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/a/deployments/web?fieldManager=x",
            ),
            ("PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"),
            ("DELETE", "/api/v1/namespaces/a/secrets/s"),
        ] {
            assert!(is_write(&request(method, uri)), "{method} {uri}");
        }
        for (method, uri) in [
            ("GET", "/api/v1/namespaces/a/configmaps?watch=true"),
            ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews"),
            ("POST", "/apis/authentication.k8s.io/v1/tokenreviews"),
        ] {
            assert!(!is_write(&request(method, uri)), "{method} {uri}");
        }
    }
}
