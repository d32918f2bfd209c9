//! A trace receiver on loopback, speaking OTLP/gRPC from the protocol's own definitions
//! (opentelemetry-proto's generated service). The control plane starts one before the API
//! server and points the API server's tracing at it; a host under test exports to it too. What
//! arrives is written, one span per line, as flat JSON ([`SpanRecord`]) to a file in the run
//! directory, which tests read back ([`spans`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use serde::{Deserialize, Serialize};

use crate::Error;

/// One span as the tests read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanRecord {
    /// The exporting service's `service.name` (`reconhost`, `apiserver`).
    pub service: String,
    /// Hex.
    pub trace_id: String,
    /// Hex.
    pub span_id: String,
    /// Hex; empty for a root.
    pub parent_span_id: String,
    /// The span's name.
    pub name: String,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Links, as (trace id, span id), hex.
    pub links: Vec<(String, String)>,
}

/// The receiver, serving until dropped.
pub struct Sink {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    /// `host:port` of its gRPC endpoint.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Receiver {
    file: Mutex<std::fs::File>,
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(pairs: &[KeyValue]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut lines = String::new();
        for resource in &request.get_ref().resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .map(|kv| text(kv.value.as_ref()))
                .unwrap_or_default();
            for span in resource.scope_spans.iter().flat_map(|s| &s.spans) {
                let record = SpanRecord {
                    service: service.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    name: span.name.clone(),
                    attributes: attributes(&span.attributes),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                };
                let line = serde_json::to_string(&record).expect("a span serializes");
                lines.push_str(&line);
                lines.push('\n');
            }
        }
        let mut file = self.file.lock().expect("sink lock poisoned");
        file.write_all(lines.as_bytes())
            .map_err(|e| tonic::Status::internal(format!("writing spans: {e}")))?;
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Starts a receiver on a free loopback port, appending what it receives to `file`.
pub async fn start(file: &Path) -> Result<Sink, Error> {
    let io = |what: String| move |source| Error::Io { what, source };
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(io(format!("opening {}", file.display())))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(io("binding the OTLP receiver".to_owned()))?;
    let address = listener
        .local_addr()
        .map_err(io("the OTLP receiver's address".to_owned()))?;
    let service = TraceServiceServer::new(Receiver {
        file: Mutex::new(out),
    });
    let incoming = tokio_stream_of(listener);
    let task = tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
        if let Err(error) = served {
            tracing::warn!(%error, "the OTLP receiver stopped");
        }
    });
    Ok(Sink { address, task })
}

/// The listener's connections as the stream tonic serves.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

/// Every span received so far, in arrival order.
pub fn spans(file: &Path) -> Vec<SpanRecord> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The file a control plane's receiver writes, in its run directory.
pub fn file_in(dir: &Path) -> PathBuf {
    dir.join("traces.jsonl")
}
