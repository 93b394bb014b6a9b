//! The broker's layers, as ARCHITECTURE.md states them, held by reading the sources: what a
//! layer may not import. A module moved or an import added against these rules fails here.

use std::path::Path;

/// Modules of the service layer: they decide and keep state, and never reach the node (the
/// shard, its routing, the controller, replication) nor the handlers or the front.
const SERVICES: &[&str] = &[
    "src/group/mod.rs",
    "src/group/state.rs",
    "src/group/consumer.rs",
    "src/group/consumer_ops.rs",
    "src/group/migration.rs",
    "src/group/assignor.rs",
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

/// Every broker module's layer, lowest first, as ARCHITECTURE.md lists them: the image,
/// decisions, config, services, the node, handlers and the connection, the server. A module
/// imports only from its own layer or below.
const LAYERS: &[(&str, &[&str])] = &[
    ("image", &["catalog.rs"]),
    (
        "decisions",
        &[
            "group/state.rs",
            "group/join.rs",
            "group/consumer.rs",
            "group/consumer/",
            "group/assignor.rs",
            "txn/state.rs",
            "fetch_session.rs",
        ],
    ),
    (
        "config",
        &[
            "config.rs",
            "topic_config.rs",
            "cluster/config.rs",
            "numa.rs",
        ],
    ),
    (
        "services",
        &[
            "group/mod.rs",
            "group/consumer_ops.rs",
            "group/migration.rs",
            "txn/mod.rs",
            "coordinator_log.rs",
            "quota.rs",
            "authz.rs",
            "limits.rs",
            "metrics.rs",
            "inter_broker.rs",
            "conn.rs",
            "partition_dirs.rs",
            "sasl.rs",
            "socket.rs",
            "tls_acceptor.rs",
            "tls_reload.rs",
        ],
    ),
    (
        "node",
        &[
            "shard.rs",
            "routing.rs",
            "access.rs",
            "coordinators.rs",
            "fetch_wait.rs",
            "controller.rs",
            "cluster/mod.rs",
            "cluster/node.rs",
            "replica/",
            "tiered/",
            "txn/markers.rs",
        ],
    ),
    ("handlers", &["handlers/", "connection.rs"]),
    (
        "server",
        &[
            "server.rs",
            "accept.rs",
            "metrics/http.rs",
            "main.rs",
            "lib.rs",
        ],
    ),
];

/// The layer of the module in `file` (relative to `src/`).
fn layer_of(file: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, files)| {
        files
            .iter()
            .any(|f| file == *f || (f.ends_with('/') && file.starts_with(f)))
    })
}

/// The file a `crate::a::b::c` path names: the longest prefix that is a module file.
fn module_file(src: &Path, path: &[&str]) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let stem = path[..n].join("/");
        [format!("{stem}.rs"), format!("{stem}/mod.rs")]
            .into_iter()
            .find(|f| src.join(f).is_file())
    })
}

/// Each `crate::…` path in `code`, split at `::`, up to the first segment that is not a
/// lower-case module name (a type, a brace, a glob).
fn crate_paths(code: &str) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `tributary_crate::`, say
        }
        let rest = &code[i + "crate::".len()..];
        let segments: Vec<&str> = rest
            .split("::")
            .map(|s| {
                s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")
            })
            .take_while(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_lowercase() || c == '_' || c.is_ascii_digit())
            })
            .collect();
        if !segments.is_empty() {
            out.push(segments);
        }
    }
    out
}

/// `use super::…` and `use crate::…` lines with braces name several modules at once; this
/// reads `crate::a::{b, c::D}` as `crate::a::b` and `crate::a::c`.
fn expand_braces(code: &str) -> String {
    let mut out = String::new();
    for (i, part) in code.split("crate::").enumerate() {
        if i == 0 {
            out.push_str(part);
            continue;
        }
        let prefix_end = part.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
        match prefix_end {
            Some(at) if part[at..].starts_with('{') && part[..at].ends_with("::") => {
                let prefix = &part[..at];
                let close = part[at..].find('}').map_or(part.len(), |c| at + c);
                for item in part[at + 1..close].split(',') {
                    out.push_str(&format!(" crate::{prefix}{} ", item.trim()));
                }
                out.push_str(&part[close..]);
            }
            _ => {
                out.push_str("crate::");
                out.push_str(part);
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_import_runs_up_a_layer() {
    let src = broker("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut broken = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let Some(mine) = layer_of(&rel) else {
            broken.push(format!(
                "{rel} has no layer: add it to LAYERS (and ARCHITECTURE.md)"
            ));
            continue;
        };
        for segments in crate_paths(&expand_braces(&code(&path))) {
            let Some(target) = module_file(&src, &segments) else {
                continue;
            };
            let theirs = layer_of(&target).unwrap_or(0);
            if theirs > mine {
                broken.push(format!(
                    "{rel} ({}) imports {target} ({}): crate::{}",
                    LAYERS[mine].0,
                    LAYERS[theirs].0,
                    segments.join("::")
                ));
            }
        }
    }
    broken.sort();
    broken.dedup();
    assert!(
        broken.is_empty(),
        "imports up a layer:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_layer_check_sees_an_upward_import() {
    // The check above would pass over a file it could not read: it must see this one.
    let code =
        expand_braces("use crate::shard::{Shard, call};\nlet x = crate::handlers::dispatch;");
    let paths = crate_paths(&code);
    assert!(paths.contains(&vec!["shard", "call"]) || paths.contains(&vec!["shard"]));
    let src = broker("src");
    let targets: Vec<_> = paths.iter().filter_map(|p| module_file(&src, p)).collect();
    assert!(targets.contains(&"shard.rs".to_string()), "{targets:?}");
    assert!(
        targets.contains(&"handlers/mod.rs".to_string()),
        "{targets:?}"
    );
    assert!(layer_of("shard.rs") < layer_of("handlers/mod.rs"));
}
