//! The slog logger raft-rs requires, forwarding each record to `tracing` under the `raft`
//! target, with the record's key-values appended to the message.

use std::fmt::Write as _;

use slog::{Drain, Key, OwnedKVList, Record, Serializer, KV};

/// A logger whose records go to `tracing`, tagged with this node's Kafka id.
pub fn raft_logger(node_id: i32) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("node" => node_id))
}

struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut kv = KvText(String::new());
        // Serializing into a String cannot fail; a failure would only lose key-values.
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        let kv = kv.0;
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{kv}")
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{kv}"),
            slog::Level::Info => tracing::info!(target: "raft", "{msg}{kv}"),
            slog::Level::Debug => tracing::debug!(target: "raft", "{msg}{kv}"),
            slog::Level::Trace => tracing::trace!(target: "raft", "{msg}{kv}"),
        }
        Ok(())
    }
}

struct KvText(String);

impl Serializer for KvText {
    fn emit_arguments(&mut self, key: Key, val: &std::fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}
