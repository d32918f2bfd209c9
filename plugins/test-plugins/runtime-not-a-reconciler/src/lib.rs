//! Test plugin: is a component of another world.
#![allow(missing_docs, reason = "a test fixture")]

wit_bindgen::generate!({ world: "greeter", path: "wit" });

struct Plugin;

impl Guest for Plugin {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

export!(Plugin);
