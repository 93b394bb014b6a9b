//! TLS listeners' keystores and truststores, read at start-up and reloaded while the broker
//! runs, as Kafka's dynamic listener configs do: an IncrementalAlterConfigs (or AlterConfigs)
//! of a reloadable `ssl.*` key for this broker (`config::SSL_RELOADABLE_KEYS`, for the broker or
//! one `listener.name.NAME.`) makes the controller's shard build every TLS listener's handshake
//! again from the config the change would give ([`prepare`]); a keystore that does not load, or
//! whose certificate names another subject or other subject alternative names than the one
//! served (unless `ssl.allow.dn.changes` / `ssl.allow.san.changes`), refuses the change. Once it
//! is stored, every shard of the node swaps the new handshakes in for the connections it accepts
//! next (`Shard::install_tls`); connections already open keep the session they made. Naming a
//! key with the value it already has reloads a file that changed under the same path.
//!
//! The files are read on the executor's blocking thread when the broker runs (on the shard at
//! start-up, before it serves). The broker's own connections to other brokers follow the
//! reload too: they verify with the new truststore and present the new keystore.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use tracing::info;

use crate::config::BrokerConfig;
use crate::inter_broker::InterBrokerSecurity;
use crate::tls_acceptor::TlsAcceptor;

/// Every TLS listener's handshake, by listener name, built from `config`; an unusable keystore
/// or truststore is an error naming the key. A controller-only node serves no clients, so it
/// has none.
pub(crate) fn build(config: &BrokerConfig) -> Result<BTreeMap<String, TlsAcceptor>> {
    let mut out = BTreeMap::new();
    if !config.cluster.roles.broker {
        return Ok(out);
    }
    for l in config.listeners.iter().filter(|l| l.protocol.is_tls()) {
        let tls = config.listener_tls(&l.name)?;
        let acceptor = TlsAcceptor::new(&tls.settings)
            .map_err(|e| anyhow!("listener {}: {}", l.name, tls.explain(&e)))?;
        out.insert(l.name.clone(), acceptor);
    }
    Ok(out)
}

/// Logs each TLS listener's certificate and client authentication, once serving them.
pub(crate) fn log_served(acceptors: &BTreeMap<String, TlsAcceptor>, why: &str) {
    for (name, acceptor) in acceptors {
        info!(
            listener = %name,
            client_auth = %acceptor.settings.client_auth,
            subject = %acceptor.identity.subject,
            "TLS listener configured ({why})"
        );
    }
}

/// The handshakes `candidate` (the config a change would give) makes, checked against those
/// `current` serves: each keystore must load, and its certificate keep the subject and the
/// subject alternative names of the one served unless the listener allows them to change. The
/// error says which listener and what differs.
///
/// The files are read on the executor's blocking thread; the brokers' side of the inter-broker
/// listener (its truststore verifies the other brokers, its keystore is presented to them) is
/// built from the same config and comes back with the handshakes.
pub(crate) async fn prepare(
    current: BTreeMap<String, TlsAcceptor>,
    candidate: BrokerConfig,
) -> std::result::Result<(BTreeMap<String, TlsAcceptor>, InterBrokerSecurity), String> {
    let built = tributary_storage::io::blocking(move || {
        let checked = check(&current, &candidate).and_then(|acceptors| {
            let inter_broker =
                InterBrokerSecurity::from_config(&candidate).map_err(|e| format!("{e:#}"))?;
            Ok((acceptors, inter_broker))
        });
        Ok(checked)
    })
    .await;
    built.map_err(|e| format!("reading the keystores failed: {e}"))?
}

fn check(
    current: &BTreeMap<String, TlsAcceptor>,
    candidate: &BrokerConfig,
) -> std::result::Result<BTreeMap<String, TlsAcceptor>, String> {
    let next = build(candidate).map_err(|e| format!("{e:#}"))?;
    for (name, acceptor) in &next {
        let Some(served) = current.get(name) else {
            continue;
        };
        let tls = candidate.listener_tls(name).map_err(|e| format!("{e:#}"))?;
        let allow = |key: &str| format!("listener.name.{}.{key}", name.to_ascii_lowercase());
        let (old, new) = (&served.identity, &acceptor.identity);
        if !tls.allow_dn_changes && old.subject != new.subject {
            return Err(format!(
                "listener {name}: the new keystore's certificate has subject {:?}, not {:?} as the one served; keep the subject, or set {} to true to allow it",
                new.subject,
                old.subject,
                allow("ssl.allow.dn.changes")
            ));
        }
        if !tls.allow_san_changes && old.subject_alt_names != new.subject_alt_names {
            return Err(format!(
                "listener {name}: the new keystore's certificate has subject alternative names {:?}, not {:?} as the one served; keep them, or set {} to true to allow it",
                new.subject_alt_names,
                old.subject_alt_names,
                allow("ssl.allow.san.changes")
            ));
        }
    }
    Ok(next)
}

/// At start-up: the handshakes of the listeners whose TLS settings the dynamic configs of the
/// metadata image (`effective`) change from the static ones the process started with
/// (`started`), rebuilt from the effective config. A dynamic keystore that no longer loads keeps
/// the static one, with a warning: the broker still serves.
pub(crate) fn dynamic_at_start(
    started: &BTreeMap<String, TlsAcceptor>,
    effective: &BrokerConfig,
) -> BTreeMap<String, TlsAcceptor> {
    let mut out = BTreeMap::new();
    for (name, acceptor) in started {
        let Ok(tls) = effective.listener_tls(name) else {
            continue;
        };
        if *acceptor.settings == tls.settings {
            continue;
        }
        match TlsAcceptor::new(&tls.settings) {
            Ok(dynamic) => {
                out.insert(name.clone(), dynamic);
            }
            Err(e) => tracing::warn!(
                listener = %name,
                "the dynamic TLS configs do not load ({}); serving the keystore set at start-up",
                tls.explain(&e)
            ),
        }
    }
    out
}

/// At start-up: the brokers' side of the inter-broker listener (`started`, built from the
/// static config), built again from the effective config only when the image's dynamic TLS
/// configs change that listener's settings — the only part of it they can change. One that
/// does not load keeps `started`, with a warning.
pub(crate) fn inter_broker_at_start(
    started: InterBrokerSecurity,
    config: &BrokerConfig,
    effective: &BrokerConfig,
) -> InterBrokerSecurity {
    let changed = config.listeners.first().is_some_and(|l| {
        match (
            config.listener_tls(&l.name),
            effective.listener_tls(&l.name),
        ) {
            (Ok(before), Ok(now)) => before.settings != now.settings,
            _ => false,
        }
    });
    if !changed {
        return started;
    }
    match InterBrokerSecurity::from_config(effective) {
        Ok(dynamic) => dynamic,
        Err(e) => {
            tracing::warn!(
                error = %format!("{e:#}"),
                "the dynamic TLS configs do not secure connections to other brokers; using the ones set at start-up"
            );
            started
        }
    }
}
