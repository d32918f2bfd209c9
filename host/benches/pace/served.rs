//! What the API server served while a clock ran, by verb and resource, from its own
//! `apiserver_request_total`: the audit log holds the writes only, and what separates two
//! writers of the same writes on a shared machine can be the reads and watches beside them.

use std::collections::BTreeMap;

/// Requests served, by `VERB resource[/subresource]`.
#[derive(Debug, Clone, Default)]
pub struct Served(BTreeMap<String, f64>);

impl Served {
    /// The API server's counts now.
    pub async fn take(client: &kube::Client) -> Self {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("a request");
        let text = client
            .request_text(request)
            .await
            .expect("the API server's /metrics");
        Self::parse(&text)
    }

    fn parse(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split("\",")
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
                    .unwrap_or_default()
            };
            let (resource, subresource) = (label("resource"), label("subresource"));
            let what = if subresource.is_empty() {
                resource
            } else {
                format!("{resource}/{subresource}")
            };
            let key = format!("{} {what}", label("verb"));
            *counts.entry(key).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
        }
        Self(counts)
    }

    /// What was served from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(key, n)| (key.clone(), n - earlier.0.get(key).copied().unwrap_or(0.0)))
                .filter(|(_, n)| *n > 0.0)
                .collect(),
        )
    }

    /// The requests per parent, most first, those above `floor` per parent.
    pub fn per_parent(&self, parents: usize, floor: f64) -> Vec<(String, f64)> {
        let mut rows: Vec<(String, f64)> = self
            .0
            .iter()
            .map(|(key, n)| (key.clone(), n / parents as f64))
            .filter(|(_, n)| *n >= floor)
            .collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        rows
    }
}
