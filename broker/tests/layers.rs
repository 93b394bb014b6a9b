//! The broker's layers, as ARCHITECTURE.md states them, held by reading the sources: what a
//! layer may not import. A module moved or an import added against these rules fails here.

use std::path::Path;

/// Modules of the service layer: they decide and keep state, and never reach the node (the
/// shard, its routing, the controller, replication) nor the handlers or the front.
const SERVICES: &[&str] = &[
    "src/group/mod.rs",
    "src/group/state.rs",
    "src/txn/mod.rs",
    "src/txn/state.rs",
    "src/coordinator_log.rs",
    "src/quota.rs",
    "src/authz.rs",
    "src/limits.rs",
    "src/metrics.rs",
    "src/inter_broker.rs",
    "src/fetch_session.rs",
    "src/conn.rs",
    "src/config.rs",
    "src/topic_config.rs",
    "src/numa.rs",
    "src/partition_dirs.rs",
];

/// What the node and the services above may not name.
const NODE_AND_ABOVE: &[&str] = &[
    "crate::shard",
    "crate::routing",
    "crate::controller",
    "crate::cluster::node",
    "crate::replica::leader",
    "crate::replica::fetcher",
    "crate::coordinators",
    "crate::fetch_wait",
    "crate::access",
    "crate::handlers",
    "crate::connection",
    "crate::server",
];

/// The production source: without comments (a doc comment naming a type is no import) and
/// without its test module (tests may reach anything).
fn code(path: &Path) -> String {
    let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let production = src.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    production
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn broker(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn services_import_nothing_of_the_node_the_handlers_or_the_front() {
    let mut broken = Vec::new();
    for file in SERVICES {
        let src = code(&broker(file));
        for banned in NODE_AND_ABOVE {
            if src.contains(banned) {
                broken.push(format!("{file} names {banned}"));
            }
        }
        if src.contains("impl Shard {") || src.contains("impl crate::shard::Shard {") {
            broken.push(format!("{file} holds an impl Shard"));
        }
    }
    assert!(
        broken.is_empty(),
        "layer rules broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_shard_imports_no_handler_and_not_the_connection() {
    let src = code(&broker("src/shard.rs"));
    for banned in ["crate::handlers", "crate::connection", "crate::server"] {
        assert!(!src.contains(banned), "shard.rs names {banned}");
    }
}

/// The modules that send the shard work, which it runs as closures (`ShardTask`) or hosts by
/// type (`Hosted`) without naming them. (`replica/leader.rs` and `access.rs` extend `Shard`
/// with `impl Shard` blocks: the shard's own methods, kept beside what they serve.)
const SHARD_CLIENTS: &[&str] = &[
    "crate::controller",
    "crate::coordinators",
    "crate::fetch_wait",
    "crate::replica::leader",
    "crate::replica::fetcher",
    "crate::txn::markers",
    "crate::cluster::node",
];

#[test]
fn the_shard_names_none_of_the_modules_that_send_it_work() {
    let src = code(&broker("src/shard.rs"));
    for banned in SHARD_CLIENTS {
        assert!(!src.contains(banned), "shard.rs names {banned}");
    }
}

#[test]
fn handlers_share_only_their_common_module() {
    let dir = broker("src/handlers");
    let mut broken = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the handlers directory") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".rs") || name == "mod.rs" {
            continue;
        }
        let src = code(&path);
        // `use super::{...}` at the top of a handler reaches handlers/mod.rs, the dispatcher.
        if src
            .lines()
            .any(|l| l.starts_with("use super::") && !l.starts_with("use super::common"))
        {
            broken.push(format!("handlers/{name} imports from handlers/mod.rs"));
        }
        for banned in ["crate::connection", "crate::server"] {
            if src.contains(banned) {
                broken.push(format!("handlers/{name} names {banned}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "layer rules broken:\n{}",
        broken.join("\n")
    );
}
