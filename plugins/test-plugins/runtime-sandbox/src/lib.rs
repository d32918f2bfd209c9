//! Test plugin: probes the environment, the filesystem and the network, and reports what it
//! could reach. The host grants none of them, so every probe must come back empty or refused.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-sandbox",
            Kind::new("test.reconhost.dev/v1", "Widget"),
        )
        .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(_request: Request) -> Result<Response, Error> {
        let outcome = |r: std::io::Result<String>| match r {
            Ok(what) => json!({"reached": what}),
            Err(e) => json!({"refused": e.to_string()}),
        };
        let files = outcome(std::fs::read_dir("/").map(|d| format!("{} entries", d.count())));
        let passwd =
            outcome(std::fs::read_to_string("/etc/passwd").map(|t| format!("{} bytes", t.len())));
        let cwd = outcome(std::fs::read_dir(".").map(|d| format!("{} entries", d.count())));
        let tcp =
            outcome(std::net::TcpStream::connect("127.0.0.1:6443").map(|_| "connected".to_owned()));
        let dns = outcome(
            std::net::ToSocketAddrs::to_socket_addrs("kubernetes.default.svc:443")
                .map(|a| format!("{} addresses", a.count())),
        );
        Ok(Response::new().status(json!({
            "env": std::env::vars().count(),
            "args": std::env::args().count(),
            "files": files, "passwd": passwd, "cwd": cwd, "tcp": tcp, "dns": dns,
        })))
    }
}

reconhost_sdk::export!(Plugin);
