//! The API server's audit log: one JSON line per write request (see the policy in
//! [`crate::control_plane`]). Tests use it to check which writes the host made and that a steady
//! state makes none.

use std::path::PathBuf;

use serde::Deserialize;

/// An audit log file. Reading it again sees the events written since.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
}

/// One audited request, the fields tests look at.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// Unique id of the request.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The authenticated user.
    pub user: UserInfo,
    /// The impersonated user, if the request carried Impersonate-User.
    #[serde(default)]
    pub impersonated_user: Option<UserInfo>,
    /// What the request wrote.
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    /// The response, once the request completed.
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    /// The request path and query.
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// `ResponseComplete` or `Panic` (`RequestReceived` is omitted by the policy).
    pub stage: String,
    /// The client's User-Agent header; the host sends `reconhost/<version> (<host name>)`.
    #[serde(default)]
    pub user_agent: String,
    /// When the API server finished the request (RFC 3339, microseconds).
    #[serde(default)]
    pub stage_timestamp: String,
}

impl AuditEvent {
    /// Whether the host made this request.
    pub fn by_reconhost(&self) -> bool {
        self.user_agent.starts_with("reconhost/")
    }

    /// Which replica of the host made it: the host name in `reconhost/<version> (<host>)`.
    pub fn replica(&self) -> Option<&str> {
        let (_, rest) = self.user_agent.split_once(" (")?;
        rest.split(')').next()
    }
}

/// A user as the audit log records it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub username: String,
    /// Groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The object a request addressed.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Plural resource name, e.g. `configmaps`.
    #[serde(default)]
    pub resource: String,
    /// Namespace, empty for cluster-scoped objects.
    #[serde(default)]
    pub namespace: String,
    /// Object name (absent on create by generateName).
    #[serde(default)]
    pub name: String,
    /// API group, empty for the core group.
    #[serde(default)]
    pub api_group: String,
    /// Subresource, e.g. `status`.
    #[serde(default)]
    pub subresource: String,
}

/// The response code of a request.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ResponseStatus {
    /// HTTP status code.
    #[serde(default)]
    pub code: u16,
}

impl AuditEvent {
    /// The user the API server authorized: the impersonated one if any, else the authenticated one.
    pub fn effective_user(&self) -> &str {
        self.impersonated_user
            .as_ref()
            .unwrap_or(&self.user)
            .username
            .as_str()
    }

    /// The object's namespace, or "" if there is none.
    pub fn namespace(&self) -> &str {
        self.object_ref
            .as_ref()
            .map_or("", |o| o.namespace.as_str())
    }
}

impl AuditLog {
    /// The log at `path`.
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// Every completed write recorded so far. Lines that do not parse (a line being written
    /// at the moment of reading) are skipped; they are complete on the next read.
    pub fn events(&self) -> std::io::Result<Vec<AuditEvent>> {
        let text = std::fs::read_to_string(&self.path)?;
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str::<AuditEvent>(line).ok())
            .filter(|e| e.stage == "ResponseComplete")
            .collect())
    }

    /// The completed writes in `namespace`.
    pub fn events_in(&self, namespace: &str) -> std::io::Result<Vec<AuditEvent>> {
        Ok(self
            .events()?
            .into_iter()
            .filter(|e| e.namespace() == namespace)
            .collect())
    }
}
