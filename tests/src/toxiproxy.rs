//! A real fault proxy between a host and the API server: toxiproxy's server on loopback, driven
//! through its HTTP API. A proxy is a TCP listener that forwards to an upstream; toxics added to
//! it delay, cut or stall what goes through. TLS passes through untouched (the API server's
//! certificate names 127.0.0.1, which is where the proxy listens too).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Error;
use crate::binaries::Binaries;
use crate::host::free_ports;
use crate::process::Component;

/// A running toxiproxy server. Dropping it stops it.
pub struct Toxiproxy {
    _process: Component,
    /// Its HTTP API's port.
    api: u16,
}

impl Toxiproxy {
    /// Starts the server, logging to `log_dir`, and waits until its API answers.
    pub fn start(log_dir: &Path) -> Result<Self, Error> {
        let [api] = free_ports()?;
        let args = vec!["-host=127.0.0.1".to_owned(), format!("-port={api}")];
        let process = Component::spawn(
            "toxiproxy",
            &Binaries::tool("toxiproxy-server")?,
            &args,
            log_dir,
        )?;
        let proxy = Self {
            _process: process,
            api,
        };
        let start = Instant::now();
        while proxy.call("GET", "/version", None).is_err() {
            if start.elapsed() > Duration::from_secs(30) {
                return Err(Error::Setup("toxiproxy did not answer within 30 s".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(proxy)
    }

    /// A proxy named `name` to `upstream` (`host:port`); returns the loopback port it listens on.
    pub fn proxy(&self, name: &str, upstream: &str) -> Result<u16, Error> {
        let [port] = free_ports()?;
        let body = json!({"name": name, "listen": format!("127.0.0.1:{port}"),
                          "upstream": upstream, "enabled": true});
        self.call("POST", "/proxies", Some(&body))?;
        Ok(port)
    }

    /// Adds a toxic to a proxy: `kind` is toxiproxy's type (`latency`, `reset_peer`,
    /// `timeout`, ...), `stream` `downstream` (server to client) or `upstream`.
    pub fn add_toxic(
        &self,
        proxy: &str,
        name: &str,
        kind: &str,
        stream: &str,
        attributes: Value,
    ) -> Result<(), Error> {
        let body = json!({"name": name, "type": kind, "stream": stream, "toxicity": 1.0,
                          "attributes": attributes});
        self.call("POST", &format!("/proxies/{proxy}/toxics"), Some(&body))
            .map(drop)
    }

    /// Removes a toxic: what goes through the proxy flows freely again.
    pub fn remove_toxic(&self, proxy: &str, name: &str) -> Result<(), Error> {
        self.call("DELETE", &format!("/proxies/{proxy}/toxics/{name}"), None)
            .map(drop)
    }

    /// One request to the API: its answer's body, or an error naming the status.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<String, Error> {
        let io = |source| Error::Io {
            what: format!("{method} {path} to toxiproxy"),
            source,
        };
        let mut stream = TcpStream::connect(("127.0.0.1", self.api)).map_err(io)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(io)?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).map_err(io)?;
        let mut response = String::new();
        stream.read_to_string(&mut response).map_err(io)?;
        let (head, answer) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let code: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if !(200..300).contains(&code) {
            return Err(Error::Setup(format!(
                "toxiproxy answered {method} {path} with {code}: {answer}"
            )));
        }
        Ok(answer.to_owned())
    }
}
