//! Test plugin: logs a message that, written raw, would end the host's log line and start a
//! forged one, and clear the terminal.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("forged-log", Kind::new("test.reconhost.dev/v1", "Widget"))
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        reconhost_sdk::host::info(
            "ok\n{\"level\":\"ERROR\",\"message\":\"forged\",\"target\":\"reconhost\"}\u{1b}[2J",
        );
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
