//! Broker configuration: Kafka-style `key=value` properties from `--config FILE` and `--set`,
//! validated up front. Every limit has a key here; an unknown key or a bad value stops start-up
//! with a message naming the key.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};

use crate::topic_config::Bound;

impl BrokerConfig {
    /// Where clients reach this broker on each listener (registered with the controllers):
    /// the advertised address, else the bound one (the port as bound, for port 0).
    pub fn endpoints(&self) -> Vec<crate::catalog::Endpoint> {
        self.listeners
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let (host, port) = if i == 0 {
                    // The inter-broker listener: what the node registers as its address.
                    (self.advertised_host.clone(), self.advertised_port)
                } else {
                    let addr = l.advertised.as_deref().unwrap_or(&l.listen);
                    let (h, p) = addr.rsplit_once(':').unwrap_or((addr, "0"));
                    let bound = self.bound.get(&l.name).copied();
                    let port = match (p.parse::<u16>().unwrap_or(0), bound) {
                        (0, Some(b)) => b,
                        (p, _) => p,
                    };
                    (
                        h.trim_start_matches('[').trim_end_matches(']').to_string(),
                        port,
                    )
                };
                crate::catalog::Endpoint {
                    name: l.name.clone(),
                    host,
                    port,
                    protocol: l.protocol.id(),
                }
            })
            .collect()
    }
}

/// SASL mechanisms a SASL listener may offer.
pub const SASL_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// The `ssl.*` keys a TLS listener (SSL, SASL_SSL) reads. Each is a broker key and may be set
/// per listener as `listener.name.NAME.KEY`, which wins over the broker's.
pub const SSL_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
];

/// The `ssl.*` keys a running broker takes through IncrementalAlterConfigs / AlterConfigs, per
/// broker (as Kafka's reconfigurable SSL configs): altering one of them — even to the value it
/// has, once the file behind it changed — reloads the keystore and truststore of the TLS
/// listeners for new connections. The inline keystore keys are not among them: a private key
/// would travel in a request and sit in the metadata log.
pub const SSL_RELOADABLE_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
];

/// The `ssl.*` key `key` stands for when it is a broker's `ssl.KEY` or a listener's
/// `listener.name.NAME.ssl.KEY`, with the listener's name (lower case) in the second case.
pub fn ssl_key(key: &str) -> Option<(&'static str, Option<&str>)> {
    let (suffix, listener) = match key.strip_prefix("listener.name.") {
        Some(rest) => {
            let (name, suffix) = rest.split_once('.')?;
            if name.is_empty() {
                return None;
            }
            (suffix, Some(name))
        }
        None => (key, None),
    };
    SSL_KEYS
        .iter()
        .find(|k| **k == suffix)
        .map(|k| (*k, listener))
}

/// The keys whose values are secrets (a private key, its password, the remote store's
/// credentials). They are not in [`BROKER_KEYS`], whose values DescribeConfigs shows to any
/// client: they are accepted from `--config` and `--set` and kept in
/// [`BrokerConfig::secret_props`] only, and never logged.
pub const SECRET_KEYS: &[&str] = &[
    "ssl.keystore.key",
    "ssl.key.password",
    "remote.log.storage.s3.access.key.id",
    "remote.log.storage.s3.secret.access.key",
    "remote.log.storage.s3.session.token",
];

/// The only keystore and truststore type served (`ssl.keystore.type`, `ssl.truststore.type`).
pub const SSL_STORE_TYPE: &str = "PEM";

/// Per-listener keys served: `listener.name.NAME.MECHANISM.sasl.jaas.config` and
/// `listener.name.NAME.ssl.…` (every key of [`SSL_KEYS`]).
fn check_listener_key(key: &str, rest: &str) -> Result<()> {
    let ok = rest.split_once('.').is_some_and(|(name, suffix)| {
        !name.is_empty()
            && (SSL_KEYS.contains(&suffix)
                || SASL_MECHANISMS
                    .iter()
                    .any(|m| suffix == format!("{}.sasl.jaas.config", m.to_ascii_lowercase()))
                || suffix == "oauthbearer.sasl.server.callback.handler.class")
    });
    if !ok {
        bail!(
            "unknown config key {key:?}; per-listener keys served are listener.name.NAME.MECHANISM.sasl.jaas.config, listener.name.NAME.oauthbearer.sasl.server.callback.handler.class and listener.name.NAME.KEY for the keys {} (NAME and MECHANISM in lower case, e.g. listener.name.sasl_plaintext.plain.sasl.jaas.config, listener.name.ssl.ssl.keystore.location)",
            SSL_KEYS.join(", ")
        );
    }
    Ok(())
}

/// A secret config value: kept whole, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[hidden]")
    }
}

/// A TLS listener's settings, and which of its keys were set for the listener itself (so an
/// error can name the key the operator wrote).
#[derive(Debug, Clone)]
pub struct ListenerTls {
    pub settings: tributary_security::tls::TlsSettings,
    /// The `ssl.*` keys set as `listener.name.NAME.KEY`.
    per_listener: Vec<&'static str>,
    /// `listener.name.NAME.` with NAME in lower case.
    prefix: String,
    /// `ssl.allow.dn.changes`: a reloaded keystore may name another subject.
    pub allow_dn_changes: bool,
    /// `ssl.allow.san.changes`: a reloaded keystore may name other subject alternative names.
    pub allow_san_changes: bool,
}

impl ListenerTls {
    /// The key an `ssl.*` setting was read from: the per-listener one when that was set.
    pub fn key(&self, key: &str) -> String {
        match self.per_listener.contains(&key) {
            true => format!("{}{key}", self.prefix),
            false => key.to_string(),
        }
    }

    /// A TLS configuration error with the key it names as the operator wrote it.
    pub fn explain(&self, error: &tributary_security::tls::TlsError) -> String {
        let message = error.to_string();
        let named = SSL_KEYS
            .iter()
            .filter(|k| message.starts_with(*k))
            .max_by_key(|k| k.len());
        match named {
            Some(k) => format!("config {}{}", self.key(k), &message[k.len()..]),
            None => format!("config {message}"),
        }
    }
}

impl BrokerConfig {
    /// An `ssl.*` value for listener `name`: `listener.name.NAME.KEY` if set, else the broker's
    /// ("" when neither is set), and whether it was the listener's own.
    fn ssl_value(&self, name: &str, key: &'static str) -> (String, bool) {
        let own = format!("listener.name.{}.{key}", name.to_ascii_lowercase());
        if let Some(v) = self.listener_props.get(&own) {
            return (v.clone(), true);
        }
        let broker = match SECRET_KEYS.contains(&key) {
            true => self.secret_props.get(key).map(|s| s.0.clone()),
            false => self.values.get(key).map(|(v, _)| v.clone()),
        };
        (broker.unwrap_or_default(), false)
    }

    /// The TLS settings of listener `name`, checked without reading any file (the keystore and
    /// truststore are read when the listener starts).
    pub fn listener_tls(&self, name: &str) -> Result<ListenerTls> {
        use tributary_security::tls::{ClientAuth, TlsSettings};
        let mut per_listener = Vec::new();
        let mut get = |key: &'static str| {
            let (v, own) = self.ssl_value(name, key);
            if own {
                per_listener.push(key);
            }
            v.trim().to_string()
        };
        let keystore_type = get("ssl.keystore.type");
        let truststore_type = get("ssl.truststore.type");
        let client_auth = get("ssl.client.auth");
        let rules = get("ssl.principal.mapping.rules");
        let allow_dn_changes = get("ssl.allow.dn.changes");
        let allow_san_changes = get("ssl.allow.san.changes");
        let optional = |v: String| (!v.is_empty()).then_some(v);
        let settings = TlsSettings {
            keystore_location: optional(get("ssl.keystore.location")).map(PathBuf::from),
            keystore_certificate_chain: optional(get("ssl.keystore.certificate.chain")),
            keystore_key: optional(get("ssl.keystore.key")),
            key_password: optional(get("ssl.key.password")),
            truststore_location: optional(get("ssl.truststore.location")).map(PathBuf::from),
            client_auth: ClientAuth::None,
            principal_mapping_rules: if rules.is_empty() {
                tributary_security::tls::PRINCIPAL_MAPPING_RULES_DEFAULT.to_string()
            } else {
                rules
            },
        };
        let mut tls = ListenerTls {
            settings,
            per_listener,
            prefix: format!("listener.name.{}.", name.to_ascii_lowercase()),
            allow_dn_changes: false,
            allow_san_changes: false,
        };
        for (key, value, flag) in [
            (
                "ssl.allow.dn.changes",
                allow_dn_changes,
                &mut tls.allow_dn_changes,
            ),
            (
                "ssl.allow.san.changes",
                allow_san_changes,
                &mut tls.allow_san_changes,
            ),
        ] {
            if !value.is_empty() {
                *flag = parse_bool(key, &value).map_err(|e| anyhow!("{e} (listener {name})"))?;
            }
        }
        for (key, value) in [
            ("ssl.keystore.type", keystore_type),
            ("ssl.truststore.type", truststore_type),
        ] {
            if !value.is_empty() && !value.eq_ignore_ascii_case(SSL_STORE_TYPE) {
                bail!(
                    "config {}={value}: only PEM stores are supported (listener {name}); convert the store to PEM (e.g. keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes) and set {SSL_STORE_TYPE}",
                    tls.key(key)
                );
            }
        }
        let client_auth = if client_auth.is_empty() {
            ClientAuth::None
        } else {
            client_auth.parse().map_err(|_| {
                anyhow!(
                    "config {}={client_auth}: is not one of required, requested, none (listener {name})",
                    tls.key("ssl.client.auth")
                )
            })?
        };
        tls.settings.client_auth = client_auth;
        tls.settings
            .principal_mapper()
            .map_err(|e| anyhow!("{} (listener {name})", tls.explain(&e)))?;
        Ok(tls)
    }
}

/// A SASL listener needs mechanisms that are built, and PLAIN needs its users.
fn check_sasl(cfg: &BrokerConfig) -> Result<()> {
    for l in cfg.listeners.iter().filter(|l| l.protocol.is_sasl()) {
        if cfg.security.sasl_enabled_mechanisms.is_empty() {
            bail!(
                "config sasl.enabled.mechanisms is empty, but listener {} uses SASL; set PLAIN, SCRAM-SHA-256 and/or SCRAM-SHA-512",
                l.name
            );
        }
        for m in &cfg.security.sasl_enabled_mechanisms {
            if !SASL_MECHANISMS.contains(&m.as_str()) {
                bail!(
                    "config sasl.enabled.mechanisms: {m} is not supported (listener {} uses SASL); set PLAIN, SCRAM-SHA-256 and/or SCRAM-SHA-512",
                    l.name
                );
            }
        }
        if cfg
            .security
            .sasl_enabled_mechanisms
            .iter()
            .any(|m| m == "PLAIN")
        {
            let key = format!(
                "listener.name.{}.plain.sasl.jaas.config",
                l.name.to_ascii_lowercase()
            );
            let Some(jaas) = cfg.listener_props.get(&key) else {
                bail!(
                    "config {key} is not set, but PLAIN is in sasl.enabled.mechanisms: set it to org.apache.kafka.common.security.plain.PlainLoginModule required user_NAME=\"PASSWORD\"; (one user_ option per user)"
                );
            };
            let users = tributary_security::jaas::JaasConfig::parse(jaas)
                .map(|j| tributary_security::jaas::plain_users(&j))
                .map_err(|e| anyhow!("config {key}: {e}"))?;
            if users.is_empty() {
                bail!(
                    "config {key} names no users; add user_NAME=\"PASSWORD\" options (one per user)"
                );
            }
        }
    }
    Ok(())
}

/// Kafka's default `listener.security.protocol.map`: each protocol's own name.
pub const DEFAULT_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// One broker-level key: its default, Kafka type name and documentation.
pub struct BrokerKey {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: ConfigKind,
    pub doc: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    Bool,
    Int,
    Long,
    Double,
    String,
    List,
}

impl ConfigKind {
    /// Kafka's `DescribeConfigsResponse.ConfigType` code.
    pub fn wire_code(self) -> i8 {
        match self {
            ConfigKind::Bool => 1,
            ConfigKind::String => 2,
            ConfigKind::Int => 3,
            ConfigKind::Long => 5,
            ConfigKind::Double => 6,
            ConfigKind::List => 7,
        }
    }
}

pub const BROKER_KEYS: &[BrokerKey] = &[
    BrokerKey { name: "node.id", default: "0", kind: ConfigKind::Int, doc: "The id of this broker." },
    BrokerKey { name: "broker.rack", default: "", kind: ConfigKind::String, doc: "The rack (or zone) of this broker: new partitions spread their replicas over racks, and with replica.selector.class consumers read from a replica in their client.rack." },
    BrokerKey { name: "replica.selector.class", default: "", kind: ConfigKind::String, doc: "Which replica a consumer reads from (KIP-392): empty, the leader; org.apache.kafka.common.replica.RackAwareReplicaSelector, an in-sync replica in the consumer's client.rack." },
    BrokerKey { name: "process.roles", default: "broker,controller", kind: ConfigKind::List, doc: "The node's roles: broker (serves clients and holds replicas), controller (a voter of controller.quorum.voters, may be the active controller), or both. A broker-only node follows the controllers' metadata log; a controller-only node serves no clients." },
    BrokerKey { name: "controller.quorum.voters", default: "", kind: ConfigKind::List, doc: "The metadata quorum, as id@host:port entries (the voters' CONTROLLER listeners), e.g. 1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093. Empty: this node is the one voter of its own quorum." },
    BrokerKey { name: "listeners", default: "", kind: ConfigKind::List, doc: "NAME://host:port entries: one PLAINTEXT listener for clients and, with several voters, the one named in controller.listener.names for the quorum. Empty: clients on --listen, no quorum listener." },
    BrokerKey { name: "advertised.listeners", default: "", kind: ConfigKind::List, doc: "NAME://host:port clients are told to connect to (Metadata, FindCoordinator). Empty: --advertised-listener, else the client listener." },
    BrokerKey { name: "listener.security.protocol.map", default: DEFAULT_PROTOCOL_MAP, kind: ConfigKind::List, doc: "NAME:PROTOCOL for each listener name: how its connections are secured (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). Listeners named in controller.listener.names are the quorum's." },
    BrokerKey { name: "inter.broker.listener.name", default: "", kind: ConfigKind::String, doc: "The listener brokers register with and reach each other on (replication, transaction markers). Empty: the first PLAINTEXT listener, else the first listener. On an SSL or SASL_SSL one brokers verify each other's certificates against its ssl.truststore.location and present its keystore; on a SASL one they log in with sasl.mechanism.inter.broker.protocol as its JAAS config's user." },
    BrokerKey { name: "sasl.enabled.mechanisms", default: "GSSAPI", kind: ConfigKind::List, doc: "SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (unsecured tokens, as Kafka's default validator, unless a listener's oauthbearer.sasl.server.callback.handler.class asks for signed ones) (GSSAPI, Kafka's default, is not supported: set this when a listener uses SASL). PLAIN's users come from listener.name.NAME.plain.sasl.jaas.config; SCRAM's credentials from the cluster metadata (--add-scram, AlterUserScramCredentials)." },
    BrokerKey { name: "sasl.mechanism.inter.broker.protocol", default: "GSSAPI", kind: ConfigKind::String, doc: "The SASL mechanism a broker logs in to other brokers with when its inter-broker listener is SASL_PLAINTEXT or SASL_SSL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with the user and password of that listener's listener.name.NAME.MECHANISM.sasl.jaas.config (username=, password=). GSSAPI, Kafka's default, is not supported." },
    BrokerKey { name: "connections.max.reauth.ms", default: "0", kind: ConfigKind::Long, doc: "A SASL session's lifetime (KIP-368): clients re-authenticate before it ends, and a connection whose session ended is closed at its next request. 0: sessions never end." },
    BrokerKey { name: "ssl.keystore.type", default: "PEM", kind: ConfigKind::String, doc: "The format of the keystore of TLS listeners (SSL, SASL_SSL): only PEM." },
    BrokerKey { name: "ssl.keystore.location", default: "", kind: ConfigKind::String, doc: "A PEM file holding the broker's certificate chain (its own certificate first) and its unencrypted private key (PKCS#8, RSA or EC), for TLS listeners. Read at start-up, and again for new connections when it is altered for this broker (IncrementalAlterConfigs; the same path reloads a file that changed). Per listener: listener.name.NAME.ssl.keystore.location." },
    BrokerKey { name: "ssl.keystore.certificate.chain", default: "", kind: ConfigKind::String, doc: "The broker's certificate chain as inline PEM, with ssl.keystore.key, instead of ssl.keystore.location." },
    BrokerKey { name: "ssl.truststore.type", default: "PEM", kind: ConfigKind::String, doc: "The format of the truststore: only PEM." },
    BrokerKey { name: "ssl.truststore.location", default: "", kind: ConfigKind::String, doc: "A PEM file of the CA certificates that sign client certificates; needed when ssl.client.auth is requested or required." },
    BrokerKey { name: "ssl.client.auth", default: "none", kind: ConfigKind::String, doc: "Whether TLS clients must present a certificate signed by the truststore: none, requested (a client without one is User:ANONYMOUS) or required. On an SSL listener the principal is User: followed by the certificate's subject, mapped by ssl.principal.mapping.rules." },
    BrokerKey { name: "ssl.allow.dn.changes", default: "false", kind: ConfigKind::Bool, doc: "Whether a keystore reloaded while the broker runs (by altering ssl.keystore.location) may hold a certificate with another subject than the one served (KIP-978). Per listener: listener.name.NAME.ssl.allow.dn.changes." },
    BrokerKey { name: "ssl.allow.san.changes", default: "false", kind: ConfigKind::Bool, doc: "Whether a keystore reloaded while the broker runs may hold a certificate with other subject alternative names than the one served (KIP-978)." },
    BrokerKey { name: "ssl.principal.mapping.rules", default: "DEFAULT", kind: ConfigKind::String, doc: "Rules mapping a client certificate's subject (RFC 2253, e.g. CN=alice,OU=eng,O=acme) to a user name, as Kafka writes them: RULE:pattern/replacement/[LU], DEFAULT (the subject as it is)." },
    BrokerKey { name: "authorizer.class.name", default: "", kind: ConfigKind::String, doc: "Empty: every request is allowed. org.apache.kafka.metadata.authorizer.StandardAuthorizer (or kafka.security.authorizer.AclAuthorizer): requests are checked against the ACLs in the cluster metadata (CreateAcls, DescribeAcls, DeleteAcls) with Kafka's rules." },
    BrokerKey { name: "super.users", default: "", kind: ConfigKind::String, doc: "Principals allowed everything whatever the ACLs, separated by semicolons: User:admin;User:ops. With a PLAINTEXT inter-broker listener the brokers are User:ANONYMOUS: list it for replication and markers to pass; with a SASL one, list the brokers' user." },
    BrokerKey { name: "allow.everyone.if.no.acl.found", default: "false", kind: ConfigKind::Bool, doc: "With an authorizer: allow a request on a resource no ACL names (false: deny it)." },
    BrokerKey { name: "controller.listener.names", default: "CONTROLLER", kind: ConfigKind::List, doc: "Names of the listeners (in listeners) the metadata quorum uses; only quorum peers may connect there." },
    BrokerKey { name: "controller.quorum.election.timeout.ms", default: "1000", kind: ConfigKind::Int, doc: "How long a quorum voter waits without hearing from a leader before it starts an election; the quorum's heartbeats run at a tenth of it." },
    BrokerKey { name: "broker.session.timeout.ms", default: "2000", kind: ConfigKind::Int, doc: "A broker the active controller has not heard from for this long is fenced: its partitions move to other in-sync replicas. Only for brokers that left no evidence of their death (paused, cut off): one whose process is gone is fenced at once. Kafka's default is 9000, sized for JVM pauses." },
    BrokerKey { name: "broker.heartbeat.interval.ms", default: "250", kind: ConfigKind::Int, doc: "How often the active controller checks the brokers' liveness (the quorum's own traffic, every tenth of controller.quorum.election.timeout.ms, is their heartbeat); evidence of a death is acted on at once." },
    BrokerKey { name: "auto.create.topics.enable", default: "true", kind: ConfigKind::Bool, doc: "Create a topic when a client asks for its metadata and it does not exist." },
    BrokerKey { name: "num.partitions", default: "1", kind: ConfigKind::Int, doc: "Partitions of auto-created topics and of CreateTopics requests that ask for the default." },
    BrokerKey { name: "default.replication.factor", default: "1", kind: ConfigKind::Int, doc: "Replication factor of auto-created topics and of CreateTopics requests that ask for the default; at most the live brokers." },
    BrokerKey { name: "min.insync.replicas", default: "1", kind: ConfigKind::Int, doc: "In-sync replicas (the leader among them) that must hold a write for acks=all; fewer: NOT_ENOUGH_REPLICAS (topic override: min.insync.replicas)." },
    BrokerKey { name: "auto.leader.rebalance.enable", default: "true", kind: ConfigKind::Bool, doc: "The active controller moves partitions back to their preferred (first) replica when a broker leads too few of the partitions it prefers." },
    BrokerKey { name: "leader.imbalance.check.interval.seconds", default: "300", kind: ConfigKind::Long, doc: "How often the active controller checks the leader imbalance." },
    BrokerKey { name: "leader.imbalance.per.broker.percentage", default: "10", kind: ConfigKind::Int, doc: "Share of a broker's preferred partitions it may not lead before the controller rebalances them." },
    BrokerKey { name: "unclean.leader.election.enable", default: "false", kind: ConfigKind::Bool, doc: "When a partition's in-sync replicas are all fenced, the active controller lets a live replica outside the ISR lead it (the ISR becomes that replica alone): the partition comes back online, but records acknowledged only by the old ISR are lost. false: the partition stays offline until an ISR member returns (topic override: unclean.leader.election.enable)." },
    BrokerKey { name: "replica.lag.time.max.ms", default: "30000", kind: ConfigKind::Long, doc: "A follower that has not caught up with its leader's log end for this long leaves the ISR; it rejoins once caught up." },
    BrokerKey { name: "replica.fetch.max.bytes", default: "1048576", kind: ConfigKind::Int, doc: "Record bytes a follower asks its leader for per partition in one fetch; a first batch larger than this is still returned whole. At least 1." },
    BrokerKey { name: "replica.backlog.max.bytes", default: "", kind: ConfigKind::Long, doc: "Bytes a leader may hold of a replicated partition that its ISR does not hold yet before acks=all batches wait for room (in arrival order, within their request's timeout) instead of being appended: an in-sync follower's next fetch then takes all of it, so a flood of producers cannot push a healthy follower out of the ISR by outrunning its fetches. acks=0 and acks=1 batches never wait. Unset: replica.fetch.max.bytes; 0: no bound (Kafka's behaviour)." },
    BrokerKey { name: "replica.fetch.silence.max.ms", default: "5000", kind: ConfigKind::Long, doc: "A follower none of whose fetches reached its leader for this long (a link cut between the two while both still reach the controller) leaves the ISR without waiting out replica.lag.time.max.ms, which still bounds a follower that fetches but trails. A value below twice replica.fetch.wait.max.ms counts as that (an idle follower's fetch is held that long); 0 turns the rule off. A follower fetches again only once its last fetch is durable, so under a full-speed flood its fetches can be over a second apart: keep well above that. Kafka has no such rule: its followers leave only after replica.lag.time.max.ms (30 s)." },
    BrokerKey { name: "replica.link.timeout.ms", default: "2000", kind: ConfigKind::Int, doc: "How long the kernel may go without an answer from the other end of a leader-follower connection (data sent unacknowledged, or keepalive probes from half of it idle) before it ends the connection: the leader then takes a follower whose fetches came over it out of the ISR at once, and the follower reconnects. A busy or paused broker's kernel still answers, so only a network cut or a machine gone trips it. 0 leaves the kernel's defaults (minutes); otherwise at least 1000. Kafka has no such setting." },
    BrokerKey { name: "replica.fetch.wait.max.ms", default: "500", kind: ConfigKind::Int, doc: "How long a leader may hold a follower's fetch while it has nothing new. At least 1, and at most replica.socket.timeout.ms and replica.lag.time.max.ms." },
    BrokerKey { name: "replica.socket.timeout.ms", default: "30000", kind: ConfigKind::Int, doc: "A follower's fetch not answered within this long is given up and its connection to the leader reopened. At least replica.fetch.wait.max.ms." },
    BrokerKey { name: "message.max.bytes", default: "1048588", kind: ConfigKind::Int, doc: "Largest record batch the broker accepts, after compression (topic override: max.message.bytes)." },
    BrokerKey { name: "socket.request.max.bytes", default: "104857600", kind: ConfigKind::Int, doc: "Largest request frame; a larger length prefix closes the connection." },
    BrokerKey { name: "log.segment.bytes", default: "1073741824", kind: ConfigKind::Int, doc: "Size at which a partition rolls to a new segment file (topic override: segment.bytes)." },
    BrokerKey { name: "log.roll.ms", default: "", kind: ConfigKind::Long, doc: "Roll a segment when its batches' timestamps span more than this (topic override: segment.ms); unset: log.roll.hours." },
    BrokerKey { name: "log.roll.hours", default: "168", kind: ConfigKind::Int, doc: "log.roll.ms in hours, used when log.roll.ms is unset." },
    BrokerKey { name: "log.retention.ms", default: "", kind: ConfigKind::Long, doc: "Delete a segment once its newest record is older than this; -1: keep forever (topic override: retention.ms). Unset: log.retention.minutes, then log.retention.hours." },
    BrokerKey { name: "log.retention.minutes", default: "", kind: ConfigKind::Int, doc: "log.retention.ms in minutes, used when log.retention.ms is unset." },
    BrokerKey { name: "log.retention.hours", default: "168", kind: ConfigKind::Int, doc: "log.retention.ms in hours, used when neither log.retention.ms nor log.retention.minutes is set." },
    BrokerKey { name: "log.retention.bytes", default: "-1", kind: ConfigKind::Long, doc: "Delete the oldest segments of a partition larger than this; -1: no size limit (topic override: retention.bytes)." },
    BrokerKey { name: "log.retention.check.interval.ms", default: "300000", kind: ConfigKind::Long, doc: "How often each shard looks for segments that retention allows deleting." },
    BrokerKey { name: "log.index.interval.bytes", default: "4096", kind: ConfigKind::Int, doc: "Bytes of log between sparse index entries: how far a fetch or timestamp lookup scans at most past an index entry (topic override: index.interval.bytes)." },
    BrokerKey { name: "log.write.ahead.bytes", default: "1048576", kind: ConfigKind::Long, doc: "Largest append buffer of a partition: appends are copied into aligned buffers sized to hold what the partition wrote between its last two flushes, up to this, and a buffer that fills is written at once, ahead of the commit." },
    BrokerKey { name: "log.segment.zero.ahead.bytes", default: "1048576", kind: ConfigKind::Long, doc: "Zeros written to the active segment ahead of its end, so appends overwrite blocks inside the file instead of growing it: such a direct write is issued at once rather than by an io_uring worker thread, and the sync after it commits no file-size change. Only a flush of at most 1/64 of it that follows another such flush does so (a partition written a little at a time, whose latency is the point; zeroing doubles the bytes written). A segment is trimmed to its data when it rolls or closes. 0 turns it off." },
    BrokerKey { name: "log.flush.write.through", default: "true", kind: ConfigKind::Bool, doc: "Durable writes without a separate sync, for partitions with flush.messages=1: the active segment is opened O_DSYNC, so each direct write is durable when it completes (one FUA write where the device has it, else the write and a device cache flush, inside the kernel) and a durable flush skips the shard's sync round and its fdatasync on an io_uring worker thread. Every write to that segment pays it, zeros ahead included. Measured on a 2-core VM at 5,000 msgs/s: broker CPU -16 %, produce-ack p50 -38 %, full-speed produce unchanged (BENCHMARKS.md). Takes effect for a segment when it is opened or rolled to. false: writes are made durable by the sync rounds (log.flush.syncfs.*)." },
    BrokerKey { name: "log.flush.syncfs.min.files", default: "2", kind: ConfigKind::Int, doc: "Group commit across partitions: a shard's sync round that covers at least this many segment files on one filesystem makes them durable with one syncfs (one journal commit and device flush) instead of one fdatasync each. syncfs also flushes other programs' dirty data on that filesystem: on a data disk shared with heavy writers set 0 (no rounds: each partition fdatasyncs at once)." },
    BrokerKey { name: "log.flush.syncfs.max.dirty.bytes", default: "16777216", kind: ConfigKind::Long, doc: "A sync round uses syncfs only while the machine's dirty and under-writeback page cache (/proc/meminfo) is below this: syncfs writes back and waits for other programs' dirty data on the filesystem (the broker's own direct writes leave only some filesystem metadata, about 1.5 MB with 64 busy partitions). 0: never syncfs." },
    BrokerKey { name: "log.read.ahead.budget.bytes", default: "67108864", kind: ConfigKind::Long, doc: "Memory each shard may hold in log chunks read ahead for consumers reading in order; 0 turns read-ahead off." },
    BrokerKey { name: "log.tail.cache.bytes", default: "67108864", kind: ConfigKind::Long, doc: "Memory each shard may use to keep recently flushed log data for consumers reading at the tail; 0 turns the tail cache off." },
    BrokerKey { name: "log.tail.cache.partition.bytes", default: "1048576", kind: ConfigKind::Long, doc: "Most recently flushed bytes one partition keeps in the tail cache; past it they are let go and the cache refills." },
    BrokerKey { name: "log.local.retention.ms", default: "-2", kind: ConfigKind::Long, doc: "Tiered storage: how long a segment copied to the remote store stays on local disk (topic override: local.retention.ms); -2: log.retention.ms, -1: for ever." },
    BrokerKey { name: "log.local.retention.bytes", default: "-2", kind: ConfigKind::Long, doc: "Tiered storage: local bytes a partition keeps of segments copied to the remote store (topic override: local.retention.bytes); -2: log.retention.bytes, -1: no limit." },
    BrokerKey { name: "remote.log.storage.system.enable", default: "false", kind: ConfigKind::Bool, doc: "Tiered storage: topics with remote.storage.enable=true copy their closed segments to the remote log store (remote.log.storage.url) and read them back for fetches below the local log." },
    BrokerKey { name: "remote.log.storage.url", default: "", kind: ConfigKind::String, doc: "Where the remote log store is: s3://BUCKET/PREFIX (any S3-compatible store; see remote.log.storage.s3.*) or file:///DIR (a directory, for a single machine). Unset: file://DATA_DIR/remote-log." },
    BrokerKey { name: "remote.log.storage.s3.endpoint", default: "", kind: ConfigKind::String, doc: "An S3-compatible endpoint (http://host:port); unset: AWS's, or AWS_ENDPOINT_URL from the environment." },
    BrokerKey { name: "remote.log.storage.s3.region", default: "", kind: ConfigKind::String, doc: "The bucket's region; unset: AWS_REGION or AWS_DEFAULT_REGION from the environment, else us-east-1. The credentials are the secret keys remote.log.storage.s3.access.key.id, remote.log.storage.s3.secret.access.key and remote.log.storage.s3.session.token, else AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from the environment, else the instance's role; never logged or described." },
    BrokerKey { name: "remote.log.storage.s3.allow.http", default: "false", kind: ConfigKind::Bool, doc: "Allow an http:// endpoint (a store on the same host or network; never across the internet)." },
    BrokerKey { name: "remote.log.storage.max.inflight", default: "8", kind: ConfigKind::Int, doc: "Remote store operations (uploads, ranged reads, deletes) in flight at once, for the whole broker. At least 1." },
    BrokerKey { name: "remote.log.manager.task.interval.ms", default: "30000", kind: ConfigKind::Long, doc: "How often each shard copies its led partitions' closed segments to the remote store and deletes what retention.* let go of there; a failed copy is retried at the next one." },
    BrokerKey { name: "remote.log.manager.copy.max.bytes.per.second", default: "9223372036854775807", kind: ConfigKind::Long, doc: "The most log bytes per second the broker copies to the remote store (its shards share it evenly): copies pace themselves to it, leaving the CPU and network to produce and fetch. The default is no limit, as Kafka's." },
    BrokerKey { name: "remote.log.reader.chunk.bytes", default: "4194304", kind: ConfigKind::Long, doc: "Remote log objects are read in ranges of this size (at multiples of it), each one ranged GET, kept for the fetches that follow. At least 512." },
    BrokerKey { name: "remote.log.reader.read.ahead.chunks", default: "2", kind: ConfigKind::Long, doc: "Chunks past the one a remote fetch reads that are fetched at once, for a consumer reading on to find them ready; 0 reads only what fetches ask for." },
    BrokerKey { name: "remote.log.reader.chunk.cache.bytes", default: "67108864", kind: ConfigKind::Long, doc: "Memory each shard may hold in chunks of remote log objects (those being read ahead included); the oldest go first." },
    BrokerKey { name: "remote.log.index.file.cache.total.size.bytes", default: "1073741824", kind: ConfigKind::Long, doc: "Memory each shard may hold in remote segments' indexes, fetched on a remote read and kept for the next." },
    BrokerKey { name: "log.cleaner.enable", default: "true", kind: ConfigKind::Bool, doc: "Run the log cleaner, which compacts topics with cleanup.policy=compact (__consumer_offsets among them)." },
    BrokerKey { name: "log.cleaner.backoff.ms", default: "15000", kind: ConfigKind::Long, doc: "How often each shard looks for compacted partitions with enough new data to clean." },
    BrokerKey { name: "log.cleaner.min.cleanable.ratio", default: "0.5", kind: ConfigKind::Double, doc: "Clean a partition once this share of its closed log is new since its last cleaning (topic override: min.cleanable.dirty.ratio)." },
    BrokerKey { name: "log.cleaner.delete.retention.ms", default: "86400000", kind: ConfigKind::Long, doc: "How long a tombstone stays in a compacted topic (topic override: delete.retention.ms)." },
    BrokerKey { name: "log.cleaner.dedupe.buffer.size", default: "134217728", kind: ConfigKind::Long, doc: "Memory for the cleaner's key map per pass; a pass covers as many segments as it holds." },
    BrokerKey { name: "log.cleaner.batch.inflated.max.bytes", default: "67108864", kind: ConfigKind::Long, doc: "Largest records section a compressed batch may decompress to: a produced batch that inflates past it is refused (MESSAGE_TOO_LARGE), so the cleaner can read every batch; one written before is kept whole, uncompacted." },
    BrokerKey { name: "compression.type", default: "producer", kind: ConfigKind::String, doc: "Codec batches are stored with: producer keeps the producer's; uncompressed, gzip, snappy, lz4 or zstd recompresses a batch that differs (topic override: compression.type)." },
    BrokerKey { name: "log.message.timestamp.type", default: "CreateTime", kind: ConfigKind::String, doc: "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the broker's time as it is appended (topic override: message.timestamp.type)." },
    BrokerKey { name: "log.message.timestamp.before.max.ms", default: "9223372036854775807", kind: ConfigKind::Long, doc: "A CreateTime record more than this far behind the broker's clock is refused with INVALID_TIMESTAMP (topic override: message.timestamp.before.max.ms)." },
    BrokerKey { name: "log.message.timestamp.after.max.ms", default: "3600000", kind: ConfigKind::Long, doc: "A CreateTime record more than this far ahead of the broker's clock is refused with INVALID_TIMESTAMP (topic override: message.timestamp.after.max.ms)." },
    BrokerKey { name: "log.flush.interval.messages", default: "1", kind: ConfigKind::Long, doc: "fdatasync a partition once this many messages are unsynced (topic override: flush.messages). 1, the default, acknowledges nothing before it is synced; Kafka's default leaves flushing to the OS." },
    BrokerKey { name: "log.flush.interval.ms", default: "9223372036854775807", kind: ConfigKind::Long, doc: "fdatasync written data at most this long after it was written, when log.flush.interval.messages is above 1 (topic override: flush.ms)." },
    BrokerKey { name: "max.connections", default: "2147483647", kind: ConfigKind::Int, doc: "Most client connections the broker holds at once, over all shards; a connection accepted past it is closed at once." },
    BrokerKey { name: "max.connections.per.ip", default: "2147483647", kind: ConfigKind::Int, doc: "Most connections from one IP address; a connection accepted past it is closed at once (overrides: max.connections.per.ip.overrides)." },
    BrokerKey { name: "max.connections.per.ip.overrides", default: "", kind: ConfigKind::String, doc: "Per-host limits that replace max.connections.per.ip, as host:count pairs separated by commas, e.g. 10.0.0.7:2000,loadgen.local:50 (host names are resolved at start)." },
    BrokerKey { name: "connections.max.idle.ms", default: "600000", kind: ConfigKind::Long, doc: "Close a connection that sent no request for this long and is owed no response." },
    BrokerKey { name: "connection.handover.produce.requests", default: "16", kind: ConfigKind::Int, doc: "Move a PLAINTEXT or SASL_PLAINTEXT client connection, once, to the shard that owns its partitions when this many produce requests in a row wrote only to that one other shard, so its batches and answers stay on one core; a TLS connection, or one that fetched, stays where it is. 0: never move a connection." },
    BrokerKey { name: "socket.request.receive.timeout.ms", default: "60000", kind: ConfigKind::Long, doc: "A request must arrive whole within this long of its first byte; a slower sender's connection is closed (a client trickling bytes would otherwise pin its buffer forever)." },
    BrokerKey { name: "queued.max.request.bytes", default: "134217728", kind: ConfigKind::Long, doc: "Memory each shard may hold in requests being read or handled; a connection waits for room before it allocates a request's buffer and stops reading meanwhile (backpressure). At least socket.request.max.bytes; -1: no limit (Kafka's default)." },
    BrokerKey { name: "producer.id.expiration.ms", default: "86400000", kind: ConfigKind::Int, doc: "A partition forgets an idempotent producer whose last batch's timestamp is this many milliseconds old (checked on each retention pass, every log.retention.check.interval.ms, and on open). Its next batch is then accepted at any sequence, as Kafka does for a producer it holds no state for." },
    BrokerKey { name: "producer.state.partition.max.producers", default: "10000", kind: ConfigKind::Int, doc: "Most idempotent producers a partition keeps state for (Kafka has no such bound); a new one evicts the least recently used, whose next batch is then accepted at any sequence." },
    BrokerKey { name: "queued.max.requests", default: "500", kind: ConfigKind::Int, doc: "Depth of each shard's queue of requests forwarded from other shards." },
    BrokerKey { name: "shard.io.memory.bytes", default: "1048576", kind: ConfigKind::Long, doc: "Registered io_uring buffer memory per shard; locked memory, keep within RLIMIT_MEMLOCK." },
    BrokerKey { name: "numa.node", default: "", kind: ConfigKind::Int, doc: "Put the shards on this NUMA node's CPUs (those in the process's affinity mask; with --cores K the first K), as --numa-node does. Unset: every CPU of the mask, or --cores/--cpus." },
    BrokerKey { name: "shard.spin.before.park.us", default: "0", kind: ConfigKind::Long, doc: "Microseconds a shard spins before sleeping when idle: lower latency for more CPU." },
    BrokerKey { name: "metrics.listen", default: "127.0.0.1:9644", kind: ConfigKind::String, doc: "HOST:PORT of the Prometheus metrics endpoint (/metrics, /health), served by shard 0; empty: no endpoint." },
    BrokerKey { name: "shutdown.drain.timeout.ms", default: "10000", kind: ConfigKind::Long, doc: "How long shutdown waits for in-flight requests to finish before closing logs." },
    BrokerKey { name: "offsets.topic.num.partitions", default: "50", kind: ConfigKind::Int, doc: "Partitions of __consumer_offsets; fixed once the topic exists." },
    BrokerKey { name: "offsets.topic.replication.factor", default: "3", kind: ConfigKind::Int, doc: "Replicas of each __consumer_offsets partition, so group coordinators move with leadership; capped at the live brokers when the topic is created (Kafka waits for enough brokers instead)." },
    BrokerKey { name: "offsets.commit.timeout.ms", default: "5000", kind: ConfigKind::Int, doc: "How long a group coordinator's write to a replicated offsets partition may wait for its ISR; past it the request gets COORDINATOR_NOT_AVAILABLE." },
    BrokerKey { name: "offsets.topic.segment.bytes", default: "104857600", kind: ConfigKind::Int, doc: "Segment size of __consumer_offsets." },
    BrokerKey { name: "transaction.state.log.num.partitions", default: "50", kind: ConfigKind::Int, doc: "Partitions of __transaction_state (created at the first transactional request); fixed once the topic exists." },
    BrokerKey { name: "transaction.state.log.replication.factor", default: "3", kind: ConfigKind::Int, doc: "Replicas of each __transaction_state partition, so transaction coordinators move with leadership; capped at the live brokers when the topic is created." },
    BrokerKey { name: "transaction.state.log.min.isr", default: "2", kind: ConfigKind::Int, doc: "min.insync.replicas of __transaction_state (capped at its replication factor)." },
    BrokerKey { name: "transaction.state.log.segment.bytes", default: "104857600", kind: ConfigKind::Int, doc: "Segment size of __transaction_state." },
    BrokerKey { name: "transaction.max.timeout.ms", default: "900000", kind: ConfigKind::Int, doc: "The largest transaction.timeout.ms a producer may ask for; above it InitProducerId answers INVALID_TRANSACTION_TIMEOUT." },
    BrokerKey { name: "transactional.id.expiration.ms", default: "604800000", kind: ConfigKind::Int, doc: "A transactional id with no transaction for this long is forgotten (its record tombstoned)." },
    BrokerKey { name: "transaction.abort.timed.out.transaction.cleanup.interval.ms", default: "10000", kind: ConfigKind::Int, doc: "How often the transaction coordinator aborts transactions past their timeout and expires idle transactional ids." },
    BrokerKey { name: "offsets.retention.minutes", default: "10080", kind: ConfigKind::Int, doc: "How long committed offsets of an empty group are kept." },
    BrokerKey { name: "offsets.retention.check.interval.ms", default: "600000", kind: ConfigKind::Long, doc: "How often expired offsets are looked for." },
    BrokerKey { name: "offset.metadata.max.bytes", default: "4096", kind: ConfigKind::Int, doc: "Largest metadata string of a committed offset (OFFSET_METADATA_TOO_LARGE)." },
    BrokerKey { name: "group.min.session.timeout.ms", default: "6000", kind: ConfigKind::Int, doc: "Smallest session timeout a group member may ask for." },
    BrokerKey { name: "group.max.session.timeout.ms", default: "1800000", kind: ConfigKind::Int, doc: "Largest session timeout a group member may ask for." },
    BrokerKey { name: "group.initial.rebalance.delay.ms", default: "3000", kind: ConfigKind::Int, doc: "How long the first rebalance of an empty group waits for more members." },
    BrokerKey { name: "max.broker.partitions", default: "100000", kind: ConfigKind::Int, doc: "Most partitions this broker holds, all topics together (KIP-578's proposed key; Kafka has no limit). CreateTopics, CreatePartitions and auto-creation past it fail with POLICY_VIOLATION." },
    BrokerKey { name: "group.max.size", default: "1000", kind: ConfigKind::Int, doc: "Most members a consumer group may have (GROUP_MAX_SIZE_REACHED)." },
    BrokerKey { name: "group.consumer.session.timeout.ms", default: "45000", kind: ConfigKind::Int, doc: "KIP-848 consumer groups: a member not heard from for this long is removed and its partitions reassigned." },
    BrokerKey { name: "group.consumer.heartbeat.interval.ms", default: "5000", kind: ConfigKind::Int, doc: "KIP-848 consumer groups: how often members are told to heartbeat; below group.consumer.session.timeout.ms." },
    BrokerKey { name: "group.consumer.min.session.timeout.ms", default: "45000", kind: ConfigKind::Int, doc: "Smallest session a KIP-848 group may be given (its consumer.session.timeout.ms, and the broker's default)." },
    BrokerKey { name: "group.consumer.max.session.timeout.ms", default: "60000", kind: ConfigKind::Int, doc: "Largest session a KIP-848 group may be given." },
    BrokerKey { name: "group.consumer.min.heartbeat.interval.ms", default: "5000", kind: ConfigKind::Int, doc: "Shortest heartbeat interval a KIP-848 group may be given (its consumer.heartbeat.interval.ms, and the broker's default)." },
    BrokerKey { name: "group.consumer.max.heartbeat.interval.ms", default: "15000", kind: ConfigKind::Int, doc: "Longest heartbeat interval a KIP-848 group may be given." },
    BrokerKey { name: "group.consumer.max.size", default: "2147483647", kind: ConfigKind::Int, doc: "Most members a KIP-848 consumer group may have (GROUP_MAX_SIZE_REACHED)." },
    BrokerKey { name: "group.consumer.assignors", default: "uniform,range", kind: ConfigKind::List, doc: "The server-side assignors KIP-848 consumer groups may use (uniform, range); the first is used when no member names one with group.remote.assignor." },
    BrokerKey { name: "group.consumer.migration.policy", default: "bidirectional", kind: ConfigKind::String, doc: "Online migration between the classic and the KIP-848 protocol (Kafka's values, any case): bidirectional, upgrade (a classic group with members becomes a consumer group when a consumer-protocol member joins), downgrade (a consumer group whose last consumer-protocol member left becomes classic again with its classic members), disabled. Empty groups change type whatever it says." },
    BrokerKey { name: "sasl.kerberos.service.name", default: "", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: Tributary has no GSSAPI (Kerberos) mechanism." },
    BrokerKey { name: "sasl.kerberos.kinit.cmd", default: "/usr/bin/kinit", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: Tributary has no GSSAPI (Kerberos) mechanism." },
    BrokerKey { name: "sasl.kerberos.ticket.renew.window.factor", default: "0.8", kind: ConfigKind::Double, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: Tributary has no GSSAPI (Kerberos) mechanism." },
    BrokerKey { name: "sasl.kerberos.ticket.renew.jitter", default: "0.05", kind: ConfigKind::Double, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: Tributary has no GSSAPI (Kerberos) mechanism." },
    BrokerKey { name: "sasl.kerberos.min.time.before.relogin", default: "60000", kind: ConfigKind::Long, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: Tributary has no GSSAPI (Kerberos) mechanism." },
    BrokerKey { name: "sasl.kerberos.principal.to.local.rules", default: "DEFAULT", kind: ConfigKind::List, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: Tributary has no GSSAPI (Kerberos) mechanism." },
    BrokerKey { name: "sasl.login.refresh.window.factor", default: "0.8", kind: ConfigKind::Double, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: the broker logs in to no SASL server that would need its credentials refreshed." },
    BrokerKey { name: "sasl.login.refresh.window.jitter", default: "0.05", kind: ConfigKind::Double, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: the broker logs in to no SASL server that would need its credentials refreshed." },
    BrokerKey { name: "sasl.login.refresh.min.period.seconds", default: "60", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: the broker logs in to no SASL server that would need its credentials refreshed." },
    BrokerKey { name: "sasl.login.refresh.buffer.seconds", default: "300", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: the broker logs in to no SASL server that would need its credentials refreshed." },
    BrokerKey { name: "num.io.threads", default: "8", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: thread-per-core: every shard does its own I/O (--cores, --cpus)." },
    BrokerKey { name: "num.network.threads", default: "3", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: thread-per-core: every shard serves its own connections (--cores, --cpus)." },
    BrokerKey { name: "num.replica.fetchers", default: "1", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: thread-per-core: each shard fetches for the partitions it owns." },
    BrokerKey { name: "num.recovery.threads.per.data.dir", default: "2", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: thread-per-core: each shard recovers the partitions it owns." },
    BrokerKey { name: "background.threads", default: "10", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: thread-per-core: background work runs on the shards." },
    BrokerKey { name: "log.cleaner.threads", default: "1", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: thread-per-core: each shard cleans the compacted partitions it owns." },
    BrokerKey { name: "log.cleaner.dedupe.buffer.load.factor", default: "0.9", kind: ConfigKind::Double, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: the cleaner's key map is sized by log.cleaner.dedupe.buffer.size alone." },
    BrokerKey { name: "log.cleaner.io.buffer.size", default: "524288", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: the cleaner reads through the shard's direct-I/O buffers." },
    BrokerKey { name: "log.cleaner.io.max.bytes.per.second", default: "1.7976931348623157E308", kind: ConfigKind::Double, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: the cleaner's I/O is not throttled." },
    BrokerKey { name: "metric.reporters", default: "", kind: ConfigKind::List, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: metrics are served on metrics.listen (Prometheus text); there are no reporter plugins." },
    BrokerKey { name: "max.connection.creation.rate", default: "2147483647", kind: ConfigKind::Int, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: new connections are limited by max.connections and max.connections.per.ip, not by rate." },
    BrokerKey { name: "principal.builder.class", default: "", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: principals are User:<name> from SASL or the client certificate's subject; there are no builder plugins." },
    BrokerKey { name: "ssl.engine.factory.class", default: "", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: TLS is rustls; there are no engine factory plugins." },
    BrokerKey { name: "ssl.provider", default: "", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: TLS is rustls; there are no security providers." },
    BrokerKey { name: "ssl.secure.random.implementation", default: "", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: TLS is rustls, with the operating system's random source." },
    BrokerKey { name: "ssl.keymanager.algorithm", default: "SunX509", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: TLS is rustls; there are no Java key managers." },
    BrokerKey { name: "ssl.trustmanager.algorithm", default: "PKIX", kind: ConfigKind::String, doc: "Accepted for Kafka's tools, which may set it per broker, and kept; Tributary does not use it: TLS is rustls; there are no Java trust managers." },
    BrokerKey { name: "fetch.max.bytes", default: "57671680", kind: ConfigKind::Int, doc: "Most record bytes one Fetch response carries, whatever the client asks for (the first non-empty partition may exceed it, KIP-74); nothing is read past it." },
    BrokerKey { name: "inter.broker.connections.idle.max", default: "4", kind: ConfigKind::Int, doc: "Idle connections each shard keeps open to each other broker for the requests it sends one at a time — transaction markers and KIP-890 verification (Kafka has no such key; its marker channel holds one connection per broker). 0 opens a new connection, with its TLS handshake and SASL login, for every request." },
    BrokerKey { name: "sasl.oauthbearer.jwks.endpoint.url", default: "", kind: ConfigKind::String, doc: "The JSON Web Key Set signed OAUTHBEARER tokens are checked against, on listeners whose oauthbearer.sasl.server.callback.handler.class is Kafka's OAuthBearerValidatorCallbackHandler: a file URL (file:///PATH), read at start-up." },
    BrokerKey { name: "sasl.oauthbearer.expected.audience", default: "", kind: ConfigKind::List, doc: "A signed token's aud claim must name one of these (empty: not checked)." },
    BrokerKey { name: "sasl.oauthbearer.expected.issuer", default: "", kind: ConfigKind::String, doc: "A signed token's iss claim must be this (empty: not checked)." },
    BrokerKey { name: "sasl.oauthbearer.sub.claim.name", default: "sub", kind: ConfigKind::String, doc: "The claim of a signed token naming the principal." },
    BrokerKey { name: "sasl.oauthbearer.clock.skew.seconds", default: "30", kind: ConfigKind::Int, doc: "How far a signed token's exp may have passed, or its nbf be ahead, and still be accepted." },
    BrokerKey { name: "quota.window.num", default: "11", kind: ConfigKind::Int, doc: "Samples a client quota's rate is measured over (Kafka's key); a byte-rate throttle lasts at most the whole window." },
    BrokerKey { name: "quota.window.size.seconds", default: "1", kind: ConfigKind::Int, doc: "Length of each quota sample in seconds (Kafka's key); a request-percentage throttle lasts at most one sample." },
    BrokerKey { name: "quota.sensors.max", default: "10000", kind: ConfigKind::Int, doc: "(user, client id) pairs each shard measures for client quotas (Kafka has no such bound); a new pair past it makes the shard forget the least recently measured ones (a sixteenth of them, in one scan), whose rates start again from nothing." },
    BrokerKey { name: "max.incremental.fetch.session.cache.slots", default: "1000", kind: ConfigKind::Int, doc: "Fetch sessions (KIP-227) the broker keeps, shared out evenly between the shards; when full, a new session is refused (the fetch is answered without one) unless one has been unused for 2 minutes. 0: no sessions." },
];

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
    pub cpus: Vec<usize>,
    /// Every broker key with its effective value, and whether it was set explicitly.
    pub values: BTreeMap<&'static str, (String, bool)>,
    /// Every client listener, the inter-broker one (`listen`) first.
    pub listeners: Vec<crate::cluster::config::ListenerSpec>,
    /// Who a client is and what it may do: SASL mechanisms and sessions, ACL checks.
    pub security: Security,
    /// Per-listener keys, `listener.name.NAME.…` (NAME lower case), e.g.
    /// `listener.name.sasl_plaintext.plain.sasl.jaas.config`.
    pub listener_props: BTreeMap<String, String>,
    /// Broker-level keys whose values are secrets ([`SECRET_KEYS`]): never in `values`,
    /// which DescribeConfigs shows.
    pub secret_props: BTreeMap<&'static str, Secret>,
    /// The ports listeners other than the inter-broker one were bound to, by name (those given
    /// port 0 get theirs at start-up).
    pub bound: BTreeMap<String, u16>,
    /// The SASL listeners validating signed OAUTHBEARER tokens (their
    /// `oauthbearer.sasl.server.callback.handler.class` is Kafka's validator), by listener name,
    /// with the JWKS read at start-up. Other listeners take unsecured tokens.
    pub oauth_validators: HashMap<String, Arc<tributary_security::oauthbearer::SignedValidator>>,
    pub node_id: i32,
    /// `broker.rack` and `replica.selector.class`.
    pub rack: RackConfig,
    /// The node's place in the cluster: the quorum's voters and timeouts.
    pub cluster: crate::cluster::config::ClusterConfig,
    pub auto_create_topics: bool,
    pub default_replication_factor: i32,
    pub min_insync_replicas: i32,
    pub replica_lag_time_max_ms: u64,
    /// `replica.fetch.silence.max.ms`: an ISR member whose fetches stopped this long leaves
    /// (0: never for silence alone).
    pub replica_fetch_silence_max_ms: u64,
    pub replica_fetch_max_bytes: i32,
    /// `replica.backlog.max.bytes`; `None`: `replica.fetch.max.bytes`.
    pub replica_backlog_max_bytes: Option<u64>,
    pub replica_fetch_wait_max_ms: i32,
    pub replica_socket_timeout_ms: u64,
    /// `replica.link.timeout.ms`: the kernel's timeout on leader-follower connections (0: its
    /// defaults).
    pub replica_link_timeout_ms: u64,
    /// `unclean.leader.election.enable`: the topic default the active controller reads.
    pub unclean_leader_election_enable: bool,
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_seconds: u64,
    pub leader_imbalance_per_broker_percentage: u32,
    pub num_partitions: i32,
    pub message_max_bytes: usize,
    pub socket_request_max_bytes: usize,
    pub log_segment_bytes: u64,
    pub log_roll_ms: i64,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_retention_check_interval_ms: u64,
    pub log_index_interval_bytes: u64,
    pub log_flush_interval_messages: i64,
    pub log_write_ahead_bytes: u64,
    pub log_segment_zero_ahead_bytes: u64,
    pub log_flush_syncfs_min_files: usize,
    pub log_flush_write_through: bool,
    pub log_flush_syncfs_max_dirty_bytes: u64,
    pub log_read_ahead_budget_bytes: u64,
    pub log_tail_cache_bytes: u64,
    pub log_tail_cache_partition_bytes: u64,
    /// Tiered storage (`remote.log.storage.*`, `remote.log.manager.task.interval.ms`).
    pub tiered: TieredStorage,
    pub log_local_retention_ms: i64,
    pub log_local_retention_bytes: i64,
    /// `log.cleaner.*`: compaction.
    pub cleaner: LogCleaner,
    /// The codec batches are stored with; `None` keeps the producer's.
    pub compression_type: Option<i16>,
    pub log_message_timestamp_log_append_time: bool,
    pub log_message_timestamp_before_max_ms: i64,
    pub log_message_timestamp_after_max_ms: i64,
    pub log_flush_interval_ms: i64,
    pub producer_id_expiration_ms: i64,
    pub producer_state_partition_max_producers: usize,
    pub queued_max_requests: usize,
    /// `quota.sensors.max`: (user, client id) pairs a shard measures at most.
    pub quota_sensors_max: usize,
    /// `quota.window.num` samples of `quota.window.size.seconds`.
    pub quota_window: QuotaWindow,
    /// `inter.broker.connections.idle.max`: idle connections a shard keeps to each other broker.
    pub inter_broker_connections_idle_max: usize,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// `max.connections.per.ip.overrides`, host names resolved.
    pub max_connections_per_ip_overrides: Vec<(std::net::IpAddr, usize)>,
    pub connections_max_idle_ms: u64,
    /// `connection.handover.produce.requests`; 0: connections never move.
    pub connection_handover_produce_requests: u32,
    pub socket_request_receive_timeout_ms: u64,
    /// `queued.max.request.bytes`; `None` when -1 (no limit).
    pub queued_max_request_bytes: Option<usize>,
    pub shard_io_memory_bytes: usize,
    pub shard_spin_before_park_us: u64,
    /// `metrics.listen`; `None` when empty (no metrics endpoint).
    pub metrics_listen: Option<SocketAddr>,
    pub shutdown_drain_timeout_ms: u64,
    pub offsets_topic_num_partitions: i32,
    pub transaction_state_log_num_partitions: i32,
    pub transaction_state_log_replication_factor: usize,
    pub transaction_state_log_min_isr: usize,
    pub transaction_state_log_segment_bytes: u64,
    pub transaction_max_timeout_ms: i32,
    pub transactional_id_expiration_ms: u64,
    pub transaction_cleanup_interval_ms: u64,
    pub offsets_topic_segment_bytes: u64,
    pub offsets_topic_replication_factor: usize,
    pub offsets_commit_timeout_ms: u64,
    pub offsets_retention_minutes: u64,
    pub offsets_retention_check_interval_ms: u64,
    pub offset_metadata_max_bytes: usize,
    pub group_min_session_timeout_ms: u64,
    pub group_max_session_timeout_ms: u64,
    pub group_initial_rebalance_delay_ms: u64,
    pub group_max_size: usize,
    pub group_consumer: crate::group::consumer::ConsumerLimits,
    pub max_broker_partitions: i64,
    pub fetch_max_bytes: usize,
    pub max_incremental_fetch_session_cache_slots: usize,
}

/// Parses a Kafka `.properties` file: `key=value` or `key: value` lines, `#`/`!` comments.
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| anyhow!("line {}: expected key=value, found {line:?}", n + 1))?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(out)
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => bail!("config {key}: {v:?} is not a boolean; use true or false"),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str, min: i64) -> Result<T> {
    let n: i64 = v
        .parse()
        .map_err(|_| anyhow!("config {key}: {v:?} is not a whole number"))?;
    if n < min {
        bail!("config {key}: {n} is below the minimum {min}");
    }
    v.parse::<T>()
        .map_err(|_| anyhow!("config {key}: {v:?} is out of range"))
}

/// Parses `host:count,host:count` (Kafka's `max.connections.per.ip.overrides`), resolving host
/// names; the count follows the last `:` so IPv6 addresses may be given bare.
fn parse_ip_overrides(key: &str, v: &str) -> Result<Vec<(std::net::IpAddr, usize)>> {
    let mut out = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (host, count) = entry
            .rsplit_once(':')
            .ok_or_else(|| anyhow!("config {key}: {entry:?} is not host:count"))?;
        let count: usize = parse_num(key, count, 0)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ips: Vec<std::net::IpAddr> = match host.parse() {
            Ok(ip) => vec![ip],
            Err(_) => (host, 0)
                .to_socket_addrs()
                .with_context(|| format!("config {key}: cannot resolve host {host:?}"))?
                .map(|a| a.ip())
                .collect(),
        };
        if ips.is_empty() {
            bail!("config {key}: host {host:?} resolves to no address");
        }
        out.extend(ips.into_iter().map(|ip| (ip, count)));
    }
    Ok(out)
}

/// A ratio between 0 and 1.
pub fn parse_ratio(key: &str, v: &str) -> Result<f64> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => bail!("config {key}: {v:?} is not a ratio between 0 and 1"),
    }
}

/// A `compression.type` value: `None` for `producer` (batches keep the producer's codec), else
/// the codec id of Kafka's batch attributes (`uncompressed` is 0).
pub fn parse_compression_type(key: &str, v: &str) -> Result<Option<i16>> {
    use tributary_metadata::compression::Compression;
    Compression::parse_config(v)
        .map(|c| c.map(Compression::id))
        .map_err(|e| anyhow!("config {key}: {e}"))
}

/// A `message.timestamp.type` value: true for `LogAppendTime`, false for `CreateTime`.
pub fn parse_timestamp_type(key: &str, v: &str) -> Result<bool> {
    match v {
        "CreateTime" => Ok(false),
        "LogAppendTime" => Ok(true),
        _ => bail!("config {key}: {v:?}: use CreateTime or LogAppendTime"),
    }
}

/// Parses `--cpus` (`0,2-5`, the Linux CPU list format) into CPU ids.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>> {
    let cpus = crate::numa::parse_cpulist(list).map_err(|e| anyhow!("--cpus {list:?}: {e}"))?;
    if cpus.is_empty() {
        bail!("--cpus: no CPUs listed");
    }
    Ok(cpus)
}

/// CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    if ids.is_empty() {
        ids.push(0);
    }
    ids
}

pub struct ConfigInput {
    pub data_dir: PathBuf,
    pub listen: String,
    pub advertised_listener: Option<String>,
    pub cores: Option<usize>,
    pub cpus: Option<String>,
    /// `--numa-node`: the shards go on this NUMA node's CPUs (overrides `numa.node`).
    pub numa_node: Option<usize>,
    pub properties: Vec<(String, String)>,
}

fn resolve(addr: &str, what: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("{what} {addr:?} is not a HOST:PORT address"))?
        .next()
        .ok_or_else(|| anyhow!("{what} {addr:?} resolves to no address"))
}

impl BrokerConfig {
    /// The configuration `input` describes: every key checked, parsed and checked against the
    /// keys it depends on; the first bad one stops start-up with a message naming it. The groups
    /// of keys are parsed one after another in the order written here (and each group's keys in
    /// its own order), so with several bad keys the same one is reported every time.
    pub fn build(input: ConfigInput) -> Result<Self> {
        let keys = sort_keys(input.properties)?;
        let snapshot = keys.values.clone();
        let get = |k: &str| snapshot[k].0.clone();
        let get: Get = &get;
        let parts = Parts {
            times: LogTimes::parse(get)?,
            node: NodeIdentity::parse(get, &input.listen, input.advertised_listener.as_deref())?,
            cpus: shard_cpus(get, input.numa_node, input.cores, input.cpus.as_deref())?,
            repl: Replication::parse(get)?,
            topics: TopicDefaults::parse(get)?,
            log: LogStorage::parse(get)?,
            cleaner: LogCleaner::parse(get)?,
            append: Append::parse(get)?,
            net: Network::parse(get)?,
            runtime: Runtime::parse(get)?,
            coord: Coordinators::parse(get)?,
            lim: BrokerLimits::parse(get)?,
            security: Security::parse(get)?,
            tiered: TieredStorage::parse(get, &keys.secret_props, &input.data_dir)?,
            data_dir: input.data_dir,
            keys,
        };
        let mut cfg = assemble(parts);
        check_replica_fetch_wait(&cfg)?;
        check_sasl(&cfg)?;
        cfg.oauth_validators = oauth_validators(&cfg)?;
        for l in cfg.listeners.iter().filter(|l| l.protocol.is_tls()) {
            cfg.listener_tls(&l.name)?;
        }
        check_queued_max_request_bytes(&cfg)?;
        Ok(cfg)
    }
}

/// A broker key's effective value, as [`BrokerConfig::build`] reads it: the value set, else the
/// key's default ("" for keys without one). Only keys of [`BROKER_KEYS`] may be asked for.
type Get<'a> = &'a dyn Fn(&str) -> String;

/// Broker key `key` as a whole number of at least `min` (see [`parse_num`]).
fn key_num<T: std::str::FromStr>(get: Get, key: &str, min: i64) -> Result<T> {
    parse_num(key, &get(key), min)
}

/// Broker key `key` as `true` or `false` (see [`parse_bool`]).
fn key_bool(get: Get, key: &str) -> Result<bool> {
    parse_bool(key, &get(key))
}

/// The properties given, sorted by kind: broker keys (each with its effective value and
/// whether it was set), per-listener keys and secrets.
struct Keys {
    values: BTreeMap<&'static str, (String, bool)>,
    listener_props: BTreeMap<String, String>,
    secret_props: BTreeMap<&'static str, Secret>,
}

/// Sorts `properties` into [`Keys`], a later value of a key replacing an earlier one. A
/// `listener.name.…` key must be one a listener reads, and any other key a broker key or a
/// secret: an unknown key stops start-up with the list of keys served.
fn sort_keys(properties: Vec<(String, String)>) -> Result<Keys> {
    let mut values: BTreeMap<&'static str, (String, bool)> = BROKER_KEYS
        .iter()
        .map(|k| (k.name, (k.default.to_string(), false)))
        .collect();
    let mut listener_props = BTreeMap::new();
    let mut secret_props = BTreeMap::new();
    for (k, v) in properties {
        if let Some(rest) = k.strip_prefix("listener.name.") {
            check_listener_key(&k, rest)?;
            listener_props.insert(k.clone(), v);
            continue;
        }
        if let Some(secret) = SECRET_KEYS.iter().find(|s| **s == k) {
            secret_props.insert(*secret, Secret(v));
            continue;
        }
        let Some(key) = BROKER_KEYS.iter().find(|d| d.name == k) else {
            let known: Vec<&str> = BROKER_KEYS.iter().map(|d| d.name).collect();
            bail!(
                "unknown config key {k:?}; supported keys: {}",
                known.join(", ")
            );
        };
        values.insert(key.name, (v, true));
    }
    Ok(Keys {
        values,
        listener_props,
        secret_props,
    })
}

/// Every group of parsed keys [`BrokerConfig::build`] puts together, in the order parsed.
struct Parts {
    times: LogTimes,
    node: NodeIdentity,
    cpus: Vec<usize>,
    repl: Replication,
    topics: TopicDefaults,
    log: LogStorage,
    cleaner: LogCleaner,
    append: Append,
    net: Network,
    runtime: Runtime,
    coord: Coordinators,
    lim: BrokerLimits,
    security: Security,
    tiered: TieredStorage,
    data_dir: PathBuf,
    keys: Keys,
}

/// Moves each parsed value to its field. Nothing is decided here: the cross-key checks and the
/// OAUTHBEARER validators follow in [`BrokerConfig::build`], the bound ports at start-up.
fn assemble(p: Parts) -> BrokerConfig {
    BrokerConfig {
        data_dir: p.data_dir,
        listen: p.node.listen,
        advertised_host: p.node.advertised_host,
        advertised_port: p.node.advertised_port,
        cpus: p.cpus,
        node_id: p.node.node_id,
        rack: p.node.rack,
        cluster: p.node.cluster,
        default_replication_factor: p.repl.default_replication_factor,
        min_insync_replicas: p.repl.min_insync_replicas,
        replica_lag_time_max_ms: p.repl.replica_lag_time_max_ms,
        replica_fetch_silence_max_ms: p.repl.replica_fetch_silence_max_ms,
        replica_fetch_max_bytes: p.repl.replica_fetch_max_bytes,
        replica_backlog_max_bytes: p.repl.replica_backlog_max_bytes,
        replica_fetch_wait_max_ms: p.repl.replica_fetch_wait_max_ms,
        replica_socket_timeout_ms: p.repl.replica_socket_timeout_ms,
        replica_link_timeout_ms: p.repl.replica_link_timeout_ms,
        unclean_leader_election_enable: p.repl.unclean_leader_election_enable,
        auto_leader_rebalance_enable: p.repl.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_seconds: p.repl.leader_imbalance_check_interval_seconds,
        leader_imbalance_per_broker_percentage: p.repl.leader_imbalance_per_broker_percentage,
        auto_create_topics: p.topics.auto_create_topics,
        num_partitions: p.topics.num_partitions,
        message_max_bytes: p.topics.message_max_bytes,
        socket_request_max_bytes: p.topics.socket_request_max_bytes,
        log_segment_bytes: p.log.log_segment_bytes,
        log_roll_ms: p.times.log_roll_ms,
        log_retention_ms: p.times.log_retention_ms,
        log_retention_bytes: p.log.log_retention_bytes,
        log_retention_check_interval_ms: p.log.log_retention_check_interval_ms,
        log_index_interval_bytes: p.log.log_index_interval_bytes,
        log_write_ahead_bytes: p.log.log_write_ahead_bytes,
        log_segment_zero_ahead_bytes: p.log.log_segment_zero_ahead_bytes,
        log_flush_syncfs_min_files: p.log.log_flush_syncfs_min_files,
        log_flush_write_through: p.log.log_flush_write_through,
        log_flush_syncfs_max_dirty_bytes: p.log.log_flush_syncfs_max_dirty_bytes,
        log_read_ahead_budget_bytes: p.log.log_read_ahead_budget_bytes,
        log_tail_cache_bytes: p.log.log_tail_cache_bytes,
        log_tail_cache_partition_bytes: p.log.log_tail_cache_partition_bytes,
        log_local_retention_ms: p.log.log_local_retention_ms,
        log_local_retention_bytes: p.log.log_local_retention_bytes,
        tiered: p.tiered,
        cleaner: p.cleaner,
        compression_type: p.append.compression_type,
        log_message_timestamp_log_append_time: p.append.log_message_timestamp_log_append_time,
        log_message_timestamp_before_max_ms: p.append.log_message_timestamp_before_max_ms,
        log_message_timestamp_after_max_ms: p.append.log_message_timestamp_after_max_ms,
        log_flush_interval_messages: p.append.log_flush_interval_messages,
        log_flush_interval_ms: p.append.log_flush_interval_ms,
        producer_id_expiration_ms: p.append.producer_id_expiration_ms,
        producer_state_partition_max_producers: p.append.producer_state_partition_max_producers,
        queued_max_requests: p.net.queued_max_requests,
        quota_sensors_max: p.net.quota_sensors_max,
        quota_window: p.net.quota_window,
        inter_broker_connections_idle_max: p.net.inter_broker_connections_idle_max,
        max_connections: p.net.max_connections,
        max_connections_per_ip: p.net.max_connections_per_ip,
        max_connections_per_ip_overrides: p.net.max_connections_per_ip_overrides,
        connections_max_idle_ms: p.net.connections_max_idle_ms,
        connection_handover_produce_requests: p.net.connection_handover_produce_requests,
        socket_request_receive_timeout_ms: p.net.socket_request_receive_timeout_ms,
        queued_max_request_bytes: p.net.queued_max_request_bytes,
        shard_io_memory_bytes: p.runtime.shard_io_memory_bytes,
        shard_spin_before_park_us: p.runtime.shard_spin_before_park_us,
        metrics_listen: p.runtime.metrics_listen,
        shutdown_drain_timeout_ms: p.runtime.shutdown_drain_timeout_ms,
        offsets_topic_num_partitions: p.coord.offsets_topic_num_partitions,
        transaction_state_log_num_partitions: p.coord.transaction_state_log_num_partitions,
        transaction_state_log_replication_factor: p.coord.transaction_state_log_replication_factor,
        transaction_state_log_min_isr: p.coord.transaction_state_log_min_isr,
        transaction_state_log_segment_bytes: p.coord.transaction_state_log_segment_bytes,
        transaction_max_timeout_ms: p.coord.transaction_max_timeout_ms,
        transactional_id_expiration_ms: p.coord.transactional_id_expiration_ms,
        transaction_cleanup_interval_ms: p.coord.transaction_cleanup_interval_ms,
        offsets_topic_replication_factor: p.coord.offsets_topic_replication_factor,
        offsets_commit_timeout_ms: p.coord.offsets_commit_timeout_ms,
        offsets_topic_segment_bytes: p.coord.offsets_topic_segment_bytes,
        offsets_retention_minutes: p.coord.offsets_retention_minutes,
        offsets_retention_check_interval_ms: p.coord.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes: p.coord.offset_metadata_max_bytes,
        group_min_session_timeout_ms: p.coord.group_min_session_timeout_ms,
        group_max_session_timeout_ms: p.coord.group_max_session_timeout_ms,
        group_initial_rebalance_delay_ms: p.coord.group_initial_rebalance_delay_ms,
        group_max_size: p.coord.group_max_size,
        group_consumer: p.coord.group_consumer,
        max_broker_partitions: p.lim.max_broker_partitions,
        fetch_max_bytes: p.lim.fetch_max_bytes,
        max_incremental_fetch_session_cache_slots: p.lim.max_incremental_fetch_session_cache_slots,
        values: p.keys.values,
        listeners: p.node.listeners,
        security: p.security,
        listener_props: p.keys.listener_props,
        secret_props: p.keys.secret_props,
        bound: BTreeMap::new(),
        oauth_validators: HashMap::new(),
    }
}

/// How long a segment stays active and how long the log is kept, each from the finest of its
/// unit keys that is set (`log.roll.ms` over `log.roll.hours`; `log.retention.ms` over
/// `.minutes` over `.hours`). A negative retention in any unit is -1: kept forever.
struct LogTimes {
    log_roll_ms: i64,
    log_retention_ms: i64,
}

impl LogTimes {
    fn parse(get: Get) -> Result<Self> {
        let set = |k: &str| !get(k).is_empty();
        // Kafka's precedence: the finest unit that is set wins.
        let log_roll_ms: i64 = if set("log.roll.ms") {
            parse_num("log.roll.ms", &get("log.roll.ms"), 1)?
        } else {
            parse_num::<i64>("log.roll.hours", &get("log.roll.hours"), 1)? * 3_600_000
        };
        let log_retention_ms: i64 = if set("log.retention.ms") {
            parse_num("log.retention.ms", &get("log.retention.ms"), -1)?
        } else if set("log.retention.minutes") {
            let m: i64 = parse_num("log.retention.minutes", &get("log.retention.minutes"), -1)?;
            if m < 0 {
                -1
            } else {
                m * 60_000
            }
        } else {
            let h: i64 = parse_num("log.retention.hours", &get("log.retention.hours"), -1)?;
            if h < 0 {
                -1
            } else {
                h * 3_600_000
            }
        };
        Ok(Self {
            log_roll_ms,
            log_retention_ms,
        })
    }
}

/// Kafka's `RackAwareReplicaSelector`, the one replica selector served.
pub const RACK_AWARE_SELECTOR: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

/// Where the broker stands and which replica its consumers read from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RackConfig {
    /// `broker.rack`; `None` when unset.
    pub broker_rack: Option<String>,
    /// `replica.selector.class` is the rack-aware selector: a leader sends a consumer with a
    /// `client.rack` to an in-sync replica in that rack (KIP-392).
    pub rack_aware_reads: bool,
}

impl RackConfig {
    fn parse(get: Get) -> Result<Self> {
        let rack = get("broker.rack");
        let selector = get("replica.selector.class");
        let rack_aware_reads = match selector.trim() {
            "" => false,
            s if s == RACK_AWARE_SELECTOR || s == "RackAwareReplicaSelector" => true,
            other => bail!(
                "replica.selector.class {other:?} is not served: leave it empty (consumers read from the leader) or set {RACK_AWARE_SELECTOR}"
            ),
        };
        Ok(RackConfig {
            broker_rack: Some(rack.trim().to_string()).filter(|r| !r.is_empty()),
            rack_aware_reads,
        })
    }
}

/// Who the node is and where it is reached: `node.id`, its place in the cluster (roles and
/// quorum), its client listeners, and the inter-broker address it binds and registers.
struct NodeIdentity {
    node_id: i32,
    rack: RackConfig,
    cluster: crate::cluster::config::ClusterConfig,
    listeners: Vec<crate::cluster::config::ListenerSpec>,
    listen: SocketAddr,
    advertised_host: String,
    advertised_port: u16,
}

impl NodeIdentity {
    /// `cli_listen` and `cli_advertised` are `--listen` and `--advertised-listener`, used when
    /// the listener keys are unset.
    fn parse(get: Get, cli_listen: &str, cli_advertised: Option<&str>) -> Result<Self> {
        let node_id: i32 = key_num(get, "node.id", 0)?;
        let (cluster, client) =
            crate::cluster::config::parse(get, node_id, cli_listen, cli_advertised)?;
        let listen = resolve(&client.listen, "--listen")?;
        let (advertised_host, advertised_port) = match &client.advertised {
            Some(a) => {
                let (h, p) = a
                    .rsplit_once(':')
                    .ok_or_else(|| anyhow!("--advertised-listener {a:?} must be HOST:PORT"))?;
                let port: u16 = p
                    .parse()
                    .map_err(|_| anyhow!("--advertised-listener {a:?}: bad port {p:?}"))?;
                (h.to_string(), port)
            }
            None => (listen.ip().to_string(), listen.port()),
        };
        Ok(Self {
            node_id,
            rack: RackConfig::parse(get)?,
            cluster,
            listeners: client.all,
            listen,
            advertised_host,
            advertised_port,
        })
    }
}

/// The CPUs the shards run on, one shard each, all in this process's affinity mask: a NUMA
/// node's (`--numa-node`, else `numa.node`; its first `--cores` when given), the first
/// `--cores` of the mask, the `--cpus` list, or else the whole mask. A NUMA node and `--cpus`
/// both choosing is an error, as are `--cores` and `--cpus` together.
fn shard_cpus(
    get: Get,
    cli_numa_node: Option<usize>,
    cores: Option<usize>,
    cpus: Option<&str>,
) -> Result<Vec<usize>> {
    let allowed = allowed_cpus();
    let numa_node = match cli_numa_node {
        Some(n) => Some((n, format!("--numa-node {n}"))),
        None if !get("numa.node").is_empty() => {
            let n: usize = key_num(get, "numa.node", 0)?;
            Some((n, format!("config numa.node={n}")))
        }
        None => None,
    };
    let cpus = match (numa_node, cores, cpus) {
        (Some((_, what)), _, Some(_)) => bail!(
            "{what} and --cpus both choose the shards' CPUs: give one (--numa-node with --cores K takes the node's first K CPUs)"
        ),
        (Some((node, what)), cores, None) => {
            let sysfs = std::path::Path::new(crate::numa::SYSFS_ROOT);
            let topology = crate::numa::Topology::read(sysfs, &allowed)
                .with_context(|| format!("{what}: reading the NUMA topology"))?;
            topology
                .select(node, &allowed, cores)
                .map_err(|e| anyhow!("{what}: {e}"))?
        }
        (None, Some(_), Some(_)) => bail!("give --cores or --cpus, not both"),
        (None, Some(0), None) => bail!("--cores must be at least 1"),
        (None, Some(n), None) => {
            if n > allowed.len() {
                bail!(
                    "--cores {n}: only {} CPUs are in this process's affinity mask",
                    allowed.len()
                );
            }
            allowed[..n].to_vec()
        }
        (None, None, Some(list)) => {
            let cpus = parse_cpu_list(list)?;
            if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
                bail!("--cpus: CPU {bad} is not in this process's affinity mask {allowed:?}");
            }
            cpus
        }
        (None, None, None) => allowed,
    };
    Ok(cpus)
}

/// How partitions are replicated: the copies a new topic gets and how many must be in sync,
/// how followers fetch and when one leaves the ISR, and how leaders are chosen and rebalanced.
struct Replication {
    default_replication_factor: i32,
    min_insync_replicas: i32,
    replica_lag_time_max_ms: u64,
    replica_fetch_silence_max_ms: u64,
    replica_fetch_max_bytes: i32,
    replica_backlog_max_bytes: Option<u64>,
    replica_fetch_wait_max_ms: i32,
    replica_socket_timeout_ms: u64,
    replica_link_timeout_ms: u64,
    unclean_leader_election_enable: bool,
    auto_leader_rebalance_enable: bool,
    leader_imbalance_check_interval_seconds: u64,
    leader_imbalance_per_broker_percentage: u32,
}

impl Replication {
    /// Each key on its own; how `replica.fetch.wait.max.ms` must sit below the socket timeout
    /// and the lag window is checked once all are parsed ([`check_replica_fetch_wait`]).
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            default_replication_factor: key_num(get, "default.replication.factor", 1)?,
            min_insync_replicas: key_num(get, "min.insync.replicas", 1)?,
            replica_lag_time_max_ms: key_num(get, "replica.lag.time.max.ms", 1)?,
            replica_fetch_silence_max_ms: key_num(get, "replica.fetch.silence.max.ms", 0)?,
            replica_fetch_max_bytes: key_num(get, "replica.fetch.max.bytes", 1)?,
            replica_backlog_max_bytes: match get("replica.backlog.max.bytes").as_str() {
                "" => None,
                v => Some(parse_num("replica.backlog.max.bytes", v, 0)?),
            },
            replica_fetch_wait_max_ms: key_num(get, "replica.fetch.wait.max.ms", 1)?,
            replica_socket_timeout_ms: key_num::<i32>(get, "replica.socket.timeout.ms", 1)?
                .unsigned_abs()
                .into(),
            replica_link_timeout_ms: parse_link_timeout(&get("replica.link.timeout.ms"))?,
            unclean_leader_election_enable: key_bool(get, "unclean.leader.election.enable")?,
            auto_leader_rebalance_enable: key_bool(get, "auto.leader.rebalance.enable")?,
            leader_imbalance_check_interval_seconds: key_num(
                get,
                "leader.imbalance.check.interval.seconds",
                1,
            )?,
            leader_imbalance_per_broker_percentage: key_num(
                get,
                "leader.imbalance.per.broker.percentage",
                0,
            )?,
        })
    }
}

/// What a produce to a topic not yet created gets — whether it is created, and with how many
/// partitions — and the largest batch (`message.max.bytes`) and request
/// (`socket.request.max.bytes`) a client may send.
struct TopicDefaults {
    auto_create_topics: bool,
    num_partitions: i32,
    message_max_bytes: usize,
    socket_request_max_bytes: usize,
}

impl TopicDefaults {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            auto_create_topics: key_bool(get, "auto.create.topics.enable")?,
            num_partitions: key_num(get, "num.partitions", 1)?,
            message_max_bytes: key_num(get, "message.max.bytes", 0)?,
            socket_request_max_bytes: key_num(get, "socket.request.max.bytes", 1)?,
        })
    }
}

/// How the log sits on disk: segment size, retention by size and how often it is enforced,
/// index density, and the sizes of the write-ahead, zeroing, sync, read-ahead and tail-cache
/// I/O. (Roll and retention times are [`LogTimes`].)
struct LogStorage {
    log_segment_bytes: u64,
    log_retention_bytes: i64,
    log_retention_check_interval_ms: u64,
    log_index_interval_bytes: u64,
    log_write_ahead_bytes: u64,
    log_segment_zero_ahead_bytes: u64,
    log_flush_syncfs_min_files: usize,
    log_flush_syncfs_max_dirty_bytes: u64,
    log_flush_write_through: bool,
    log_read_ahead_budget_bytes: u64,
    log_tail_cache_bytes: u64,
    log_tail_cache_partition_bytes: u64,
    log_local_retention_ms: i64,
    log_local_retention_bytes: i64,
}

impl LogStorage {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            log_segment_bytes: key_num(get, "log.segment.bytes", 1024)?,
            log_retention_bytes: key_num(get, "log.retention.bytes", -1)?,
            log_retention_check_interval_ms: key_num(get, "log.retention.check.interval.ms", 1)?,
            log_index_interval_bytes: key_num(get, "log.index.interval.bytes", 0)?,
            log_write_ahead_bytes: key_num(get, "log.write.ahead.bytes", 4096)?,
            log_segment_zero_ahead_bytes: key_num(get, "log.segment.zero.ahead.bytes", 0)?,
            log_flush_syncfs_min_files: key_num(get, "log.flush.syncfs.min.files", 0)?,
            log_flush_syncfs_max_dirty_bytes: key_num(get, "log.flush.syncfs.max.dirty.bytes", 0)?,
            log_flush_write_through: key_bool(get, "log.flush.write.through")?,
            log_read_ahead_budget_bytes: key_num(get, "log.read.ahead.budget.bytes", 0)?,
            log_tail_cache_bytes: key_num(get, "log.tail.cache.bytes", 0)?,
            log_tail_cache_partition_bytes: key_num(get, "log.tail.cache.partition.bytes", 0)?,
            log_local_retention_ms: key_num(get, "log.local.retention.ms", -2)?,
            log_local_retention_bytes: key_num(get, "log.local.retention.bytes", -2)?,
        })
    }
}

/// Tiered storage: whether it is on, where the remote log store is and how to reach it, how
/// often leaders copy to it, and the memory for remote indexes.
#[derive(Debug, Clone)]
pub struct TieredStorage {
    /// `remote.log.storage.system.enable`.
    pub enabled: bool,
    /// The store: `remote.log.storage.url` (unset: `file://DATA_DIR/remote-log`) and
    /// `remote.log.storage.s3.*`, credentials included (never printed).
    pub store: tributary_remote::StoreConfig,
    pub task_interval_ms: u64,
    pub index_cache_bytes: u64,
    /// `remote.log.manager.copy.max.bytes.per.second`, for the whole broker.
    pub copy_max_bytes_per_second: u64,
    /// `remote.log.reader.*`: how a shard reads remote log objects.
    pub reader: RemoteReader,
}

/// How a shard reads remote log objects: the `remote.log.reader.*` keys.
#[derive(Debug, Clone, Copy)]
pub struct RemoteReader {
    /// `remote.log.reader.chunk.bytes`: one ranged GET.
    pub chunk_bytes: u64,
    /// `remote.log.reader.read.ahead.chunks`.
    pub read_ahead_chunks: u64,
    /// `remote.log.reader.chunk.cache.bytes`, per shard.
    pub cache_bytes: u64,
}

impl TieredStorage {
    fn parse(
        get: Get,
        secrets: &BTreeMap<&'static str, Secret>,
        data_dir: &std::path::Path,
    ) -> Result<Self> {
        let text = |key: &str| Some(get(key)).filter(|v| !v.is_empty());
        let secret = |key: &str| {
            secrets
                .get(key)
                .map(|s| tributary_remote::Secret::new(s.0.clone()))
        };
        let url = text("remote.log.storage.url").unwrap_or_else(|| {
            format!("file://{}", absolute(data_dir).join("remote-log").display())
        });
        let store = tributary_remote::StoreConfig {
            url,
            endpoint: text("remote.log.storage.s3.endpoint"),
            region: text("remote.log.storage.s3.region"),
            access_key_id: secret("remote.log.storage.s3.access.key.id")
                .map(|s| s.expose().to_string()),
            secret_access_key: secret("remote.log.storage.s3.secret.access.key"),
            session_token: secret("remote.log.storage.s3.session.token"),
            allow_http: key_bool(get, "remote.log.storage.s3.allow.http")?,
            max_inflight: key_num(get, "remote.log.storage.max.inflight", 1)?,
        };
        let enabled = key_bool(get, "remote.log.storage.system.enable")?;
        if enabled {
            store.kind().map_err(|e| anyhow!("config {e}"))?;
        }
        Ok(Self {
            enabled,
            store,
            task_interval_ms: key_num(get, "remote.log.manager.task.interval.ms", 1)?,
            index_cache_bytes: key_num(get, "remote.log.index.file.cache.total.size.bytes", 0)?,
            copy_max_bytes_per_second: key_num(
                get,
                "remote.log.manager.copy.max.bytes.per.second",
                1,
            )?,
            reader: RemoteReader {
                chunk_bytes: key_num(get, "remote.log.reader.chunk.bytes", 512)?,
                read_ahead_chunks: key_num(get, "remote.log.reader.read.ahead.chunks", 0)?,
                cache_bytes: key_num(get, "remote.log.reader.chunk.cache.bytes", 0)?,
            },
        })
    }
}

/// `dir` as an absolute path (relative to the working directory), for a `file://` URL.
fn absolute(dir: &std::path::Path) -> PathBuf {
    match dir.is_absolute() {
        true => dir.to_path_buf(),
        false => std::env::current_dir().map_or_else(|_| dir.to_path_buf(), |d| d.join(dir)),
    }
}

/// Whether and how compacted topics are cleaned: how often, from which dirty ratio, how long
/// tombstones stay, and the memory one cleaning may use.
#[derive(Debug, Clone)]
pub struct LogCleaner {
    pub log_cleaner_enable: bool,
    pub log_cleaner_backoff_ms: u64,
    pub log_cleaner_min_cleanable_ratio: f64,
    pub log_cleaner_delete_retention_ms: i64,
    pub log_cleaner_dedupe_buffer_size: u64,
    pub log_cleaner_batch_inflated_max_bytes: u64,
}

impl LogCleaner {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            log_cleaner_enable: key_bool(get, "log.cleaner.enable")?,
            log_cleaner_backoff_ms: key_num(get, "log.cleaner.backoff.ms", 1)?,
            log_cleaner_min_cleanable_ratio: parse_ratio(
                "log.cleaner.min.cleanable.ratio",
                &get("log.cleaner.min.cleanable.ratio"),
            )?,
            log_cleaner_delete_retention_ms: key_num(get, "log.cleaner.delete.retention.ms", 0)?,
            log_cleaner_dedupe_buffer_size: key_num(
                get,
                "log.cleaner.dedupe.buffer.size",
                1 << 20,
            )?,
            log_cleaner_batch_inflated_max_bytes: key_num(
                get,
                "log.cleaner.batch.inflated.max.bytes",
                1 << 20,
            )?,
        })
    }
}

/// What an append does with each batch: the codec it is stored with, which timestamp it
/// keeps and how far from now that may be, when the log is flushed, and how long and how many
/// producers' state each partition keeps for idempotence.
struct Append {
    compression_type: Option<i16>,
    log_message_timestamp_log_append_time: bool,
    log_message_timestamp_before_max_ms: i64,
    log_message_timestamp_after_max_ms: i64,
    log_flush_interval_messages: i64,
    log_flush_interval_ms: i64,
    producer_id_expiration_ms: i64,
    producer_state_partition_max_producers: usize,
}

impl Append {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            compression_type: parse_compression_type("compression.type", &get("compression.type"))?,
            log_message_timestamp_log_append_time: parse_timestamp_type(
                "log.message.timestamp.type",
                &get("log.message.timestamp.type"),
            )?,
            log_message_timestamp_before_max_ms: key_num(
                get,
                "log.message.timestamp.before.max.ms",
                0,
            )?,
            log_message_timestamp_after_max_ms: key_num(
                get,
                "log.message.timestamp.after.max.ms",
                0,
            )?,
            log_flush_interval_messages: key_num(get, "log.flush.interval.messages", 1)?,
            log_flush_interval_ms: key_num(get, "log.flush.interval.ms", 0)?,
            producer_id_expiration_ms: key_num::<i32>(get, "producer.id.expiration.ms", 1)?.into(),
            producer_state_partition_max_producers: key_num(
                get,
                "producer.state.partition.max.producers",
                1,
            )?,
        })
    }
}

/// What clients may hold of the broker: requests queued, connections (in all, per address,
/// idle to other brokers) and how long they may sit idle or take to send a request, the bytes
/// of requests read but not yet answered, and how client quotas are measured.
struct Network {
    queued_max_requests: usize,
    quota_sensors_max: usize,
    quota_window: QuotaWindow,
    inter_broker_connections_idle_max: usize,
    max_connections: usize,
    max_connections_per_ip: usize,
    max_connections_per_ip_overrides: Vec<(std::net::IpAddr, usize)>,
    connections_max_idle_ms: u64,
    connection_handover_produce_requests: u32,
    socket_request_receive_timeout_ms: u64,
    queued_max_request_bytes: Option<usize>,
}

impl Network {
    /// Host names in `max.connections.per.ip.overrides` are resolved here. That
    /// `queued.max.request.bytes` holds a request of `socket.request.max.bytes` is checked once
    /// all keys are parsed ([`check_queued_max_request_bytes`]).
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            queued_max_requests: key_num(get, "queued.max.requests", 1)?,
            quota_sensors_max: key_num(get, "quota.sensors.max", 1)?,
            quota_window: QuotaWindow {
                samples: key_num(get, "quota.window.num", 1)?,
                sample: std::time::Duration::from_secs(key_num(
                    get,
                    "quota.window.size.seconds",
                    1,
                )?),
            },
            inter_broker_connections_idle_max: key_num(
                get,
                "inter.broker.connections.idle.max",
                0,
            )?,
            max_connections: key_num(get, "max.connections", 1)?,
            max_connections_per_ip: key_num(get, "max.connections.per.ip", 1)?,
            max_connections_per_ip_overrides: parse_ip_overrides(
                "max.connections.per.ip.overrides",
                &get("max.connections.per.ip.overrides"),
            )?,
            connections_max_idle_ms: key_num(get, "connections.max.idle.ms", 1)?,
            connection_handover_produce_requests: key_num(
                get,
                "connection.handover.produce.requests",
                0,
            )?,
            socket_request_receive_timeout_ms: key_num(
                get,
                "socket.request.receive.timeout.ms",
                1,
            )?,
            queued_max_request_bytes: {
                let n: i64 = key_num(get, "queued.max.request.bytes", -1)?;
                (n >= 0).then(|| usize::try_from(n).unwrap_or(usize::MAX))
            },
        })
    }
}

/// How the process runs: each shard's I/O memory and how long it spins before parking, where
/// metrics are served, and how long shutdown waits for requests in flight.
struct Runtime {
    shard_io_memory_bytes: usize,
    shard_spin_before_park_us: u64,
    metrics_listen: Option<SocketAddr>,
    shutdown_drain_timeout_ms: u64,
}

impl Runtime {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            shard_io_memory_bytes: key_num(get, "shard.io.memory.bytes", 0)?,
            shard_spin_before_park_us: key_num(get, "shard.spin.before.park.us", 0)?,
            metrics_listen: {
                let v = get("metrics.listen");
                let v = v.trim();
                if v.is_empty() {
                    None
                } else {
                    Some(resolve(v, "metrics.listen")?)
                }
            },
            shutdown_drain_timeout_ms: key_num(get, "shutdown.drain.timeout.ms", 0)?,
        })
    }
}

/// The group and transaction coordinators: the shape of `__consumer_offsets` and
/// `__transaction_state`, how long transactions, transactional ids and committed offsets
/// live, and the limits on group members and their sessions.
struct Coordinators {
    offsets_topic_num_partitions: i32,
    transaction_state_log_num_partitions: i32,
    transaction_state_log_replication_factor: usize,
    transaction_state_log_min_isr: usize,
    transaction_state_log_segment_bytes: u64,
    transaction_max_timeout_ms: i32,
    transactional_id_expiration_ms: u64,
    transaction_cleanup_interval_ms: u64,
    offsets_topic_replication_factor: usize,
    offsets_commit_timeout_ms: u64,
    offsets_topic_segment_bytes: u64,
    offsets_retention_minutes: u64,
    offsets_retention_check_interval_ms: u64,
    offset_metadata_max_bytes: usize,
    group_min_session_timeout_ms: u64,
    group_max_session_timeout_ms: u64,
    group_initial_rebalance_delay_ms: u64,
    group_max_size: usize,
    group_consumer: crate::group::consumer::ConsumerLimits,
}

impl Coordinators {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            offsets_topic_num_partitions: key_num(get, "offsets.topic.num.partitions", 1)?,
            transaction_state_log_num_partitions: key_num(
                get,
                "transaction.state.log.num.partitions",
                1,
            )?,
            transaction_state_log_replication_factor: key_num(
                get,
                "transaction.state.log.replication.factor",
                1,
            )?,
            transaction_state_log_min_isr: key_num(get, "transaction.state.log.min.isr", 1)?,
            transaction_state_log_segment_bytes: key_num(
                get,
                "transaction.state.log.segment.bytes",
                1024,
            )?,
            transaction_max_timeout_ms: key_num(get, "transaction.max.timeout.ms", 1)?,
            transactional_id_expiration_ms: key_num(get, "transactional.id.expiration.ms", 1)?,
            transaction_cleanup_interval_ms: key_num(
                get,
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                1,
            )?,
            offsets_topic_replication_factor: key_num(get, "offsets.topic.replication.factor", 1)?,
            offsets_commit_timeout_ms: key_num(get, "offsets.commit.timeout.ms", 1)?,
            offsets_topic_segment_bytes: key_num(get, "offsets.topic.segment.bytes", 1024)?,
            offsets_retention_minutes: key_num(get, "offsets.retention.minutes", 1)?,
            offsets_retention_check_interval_ms: key_num(
                get,
                "offsets.retention.check.interval.ms",
                1,
            )?,
            offset_metadata_max_bytes: key_num(get, "offset.metadata.max.bytes", 0)?,
            group_min_session_timeout_ms: key_num(get, "group.min.session.timeout.ms", 0)?,
            group_max_session_timeout_ms: key_num(get, "group.max.session.timeout.ms", 0)?,
            group_initial_rebalance_delay_ms: key_num(get, "group.initial.rebalance.delay.ms", 0)?,
            group_max_size: key_num(get, "group.max.size", 1)?,
            group_consumer: consumer_group_limits(get)?,
        })
    }
}

/// The `group.consumer.*` keys of KIP-848 consumer groups.
fn consumer_group_limits(get: Get) -> Result<crate::group::consumer::ConsumerLimits> {
    use crate::group::assignor::Assignor;
    let ms = std::time::Duration::from_millis;
    let session: u64 = key_num(get, "group.consumer.session.timeout.ms", 1)?;
    let heartbeat: u64 = key_num(get, "group.consumer.heartbeat.interval.ms", 1)?;
    if heartbeat >= session {
        bail!(
            "group.consumer.heartbeat.interval.ms ({heartbeat}) must be below \
             group.consumer.session.timeout.ms ({session})"
        );
    }
    let range = |what: &str| -> Result<(u64, u64)> {
        let lo: u64 = key_num(get, &format!("group.consumer.min.{what}"), 1)?;
        let hi: u64 = key_num(get, &format!("group.consumer.max.{what}"), 1)?;
        if lo > hi {
            bail!("group.consumer.min.{what} ({lo}) is above group.consumer.max.{what} ({hi})");
        }
        Ok((lo, hi))
    };
    let session_range = range("session.timeout.ms")?;
    let heartbeat_range = range("heartbeat.interval.ms")?;
    for (key, value, (lo, hi)) in [
        ("group.consumer.session.timeout.ms", session, session_range),
        (
            "group.consumer.heartbeat.interval.ms",
            heartbeat,
            heartbeat_range,
        ),
    ] {
        if !(lo..=hi).contains(&value) {
            bail!("{key} ({value}) must be within its min and max keys ({lo}..={hi}); set the min or max key too");
        }
    }
    let mut assignors = [None; 2];
    let names = get("group.consumer.assignors");
    let names: Vec<&str> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() || names.len() > assignors.len() {
        bail!("group.consumer.assignors must name one or both of uniform, range; got {names:?}");
    }
    for (slot, name) in assignors.iter_mut().zip(&names) {
        *slot = Some(Assignor::named(name).ok_or_else(|| {
            anyhow!("group.consumer.assignors: unknown assignor {name}; the assignors are uniform and range")
        })?);
    }
    let policy = get("group.consumer.migration.policy");
    let migration =
        crate::group::consumer::MigrationPolicy::named(policy.trim()).ok_or_else(|| {
            anyhow!(
                "group.consumer.migration.policy: unknown policy {policy:?}; the policies are {}",
                crate::group::consumer::MigrationPolicy::NAMES.join(", ")
            )
        })?;
    Ok(crate::group::consumer::ConsumerLimits {
        max_size: key_num(get, "group.consumer.max.size", 1)?,
        migration,
        session_timeout: std::time::Duration::from_millis(session),
        heartbeat_interval: std::time::Duration::from_millis(heartbeat),
        assignors,
        session_timeout_range: (ms(session_range.0), ms(session_range.1)),
        heartbeat_interval_range: (ms(heartbeat_range.0), ms(heartbeat_range.1)),
    })
}

/// How much one broker holds and serves: partitions in all, record bytes per Fetch response,
/// and fetch sessions.
struct BrokerLimits {
    max_broker_partitions: i64,
    fetch_max_bytes: usize,
    max_incremental_fetch_session_cache_slots: usize,
}

impl BrokerLimits {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            max_broker_partitions: key_num::<i32>(get, "max.broker.partitions", 1)?.into(),
            fetch_max_bytes: key_num(get, "fetch.max.bytes", 1024)?,
            max_incremental_fetch_session_cache_slots: key_num(
                get,
                "max.incremental.fetch.session.cache.slots",
                0,
            )?,
        })
    }
}

/// Who a client is and what it may do: the SASL mechanisms offered and how long a login
/// lasts, the key fake SCRAM credentials are salted with, and whether and how ACLs are
/// checked. (The per-listener SASL and TLS keys are checked once all keys are parsed.)
#[derive(Debug, Clone)]
pub struct Security {
    /// `sasl.enabled.mechanisms`, checked against what is built when a listener uses SASL.
    pub sasl_enabled_mechanisms: Vec<String>,
    /// `connections.max.reauth.ms`; 0: SASL sessions never end.
    pub connections_max_reauth_ms: u64,
    /// Random per process: salts the fake SCRAM credential an unknown user is answered with.
    pub scram_unknown_user_key: [u8; 32],
    /// `authorizer.class.name` names Kafka's standard authorizer: requests are checked
    /// against the ACLs.
    pub authorizer_enabled: bool,
    /// `super.users`.
    pub super_users: std::collections::HashSet<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_everyone_if_no_acl_found: bool,
}

impl Security {
    fn parse(get: Get) -> Result<Self> {
        Ok(Self {
            sasl_enabled_mechanisms: get("sasl.enabled.mechanisms")
                .split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty())
                .collect(),
            connections_max_reauth_ms: key_num(get, "connections.max.reauth.ms", 0)?,
            scram_unknown_user_key: tributary_security::scram::generate_unknown_user_key()
                .map_err(|e| anyhow!("{e}"))?,
            authorizer_enabled: match get("authorizer.class.name").trim() {
                "" => false,
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                | "kafka.security.authorizer.AclAuthorizer" => true,
                other => bail!(
                    "config authorizer.class.name={other}: unknown authorizer; use org.apache.kafka.metadata.authorizer.StandardAuthorizer (ACLs in the cluster metadata) or leave it empty"
                ),
            },
            super_users: tributary_security::acl::parse_super_users(&get("super.users"))
                .map_err(|e| anyhow!("config super.users: {e}"))?,
            allow_everyone_if_no_acl_found: key_bool(get, "allow.everyone.if.no.acl.found")?,
        })
    }
}

/// `queued.max.request.bytes` must hold one request of `socket.request.max.bytes`: a smaller
/// budget could never admit the largest request allowed.
fn check_queued_max_request_bytes(cfg: &BrokerConfig) -> Result<()> {
    if let Some(budget) = cfg.queued_max_request_bytes {
        if budget < cfg.socket_request_max_bytes {
            bail!(
                "config queued.max.request.bytes: {budget} is below socket.request.max.bytes {}; a request of the largest allowed size could never be read. Raise it, or lower socket.request.max.bytes",
                cfg.socket_request_max_bytes
            );
        }
    }
    Ok(())
}

/// Kafka's validator of signed OAUTHBEARER tokens (KIP-768), under its package before and after
/// Kafka 3.4.
pub const OAUTH_VALIDATOR_CLASSES: &[&str] = &[
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
];

/// The signed-token validators of the SASL listeners that set
/// `listener.name.NAME.oauthbearer.sasl.server.callback.handler.class` to Kafka's validator:
/// the JWKS named by `sasl.oauthbearer.jwks.endpoint.url` (a `file:` URL) is read and checked
/// here, so a missing or unusable one stops start-up with a message naming the key.
fn oauth_validators(
    cfg: &BrokerConfig,
) -> Result<HashMap<String, Arc<tributary_security::oauthbearer::SignedValidator>>> {
    let mut out = HashMap::new();
    for l in cfg.listeners.iter().filter(|l| l.protocol.is_sasl()) {
        let key = format!(
            "listener.name.{}.oauthbearer.sasl.server.callback.handler.class",
            l.name.to_ascii_lowercase()
        );
        let Some(class) = cfg.listener_props.get(&key).map(|c| c.trim()) else {
            continue;
        };
        if !OAUTH_VALIDATOR_CLASSES.contains(&class) {
            bail!(
                "config {key}={class}: not a validator Tributary has; set {} to check signed tokens against a JWKS, or leave it unset for unsecured tokens",
                OAUTH_VALIDATOR_CLASSES[0]
            );
        }
        if !cfg
            .security
            .sasl_enabled_mechanisms
            .iter()
            .any(|m| m == "OAUTHBEARER")
        {
            bail!("config {key} is set, but OAUTHBEARER is not in sasl.enabled.mechanisms");
        }
        let url_key = "sasl.oauthbearer.jwks.endpoint.url";
        let url = cfg.values[url_key].0.trim().to_string();
        let path = match url.strip_prefix("file://") {
            Some(path) if path.starts_with('/') => PathBuf::from(path),
            _ if url.is_empty() => bail!(
                "config {url_key} is not set, but {key} validates signed tokens: set it to the JWKS file, file:///PATH"
            ),
            _ => bail!(
                "config {url_key}={url}: only a file URL (file:///PATH) is supported; fetch the identity provider's JWKS into a file"
            ),
        };
        let bytes = std::fs::read(&path)
            .map_err(|e| anyhow!("config {url_key}: cannot read {}: {e}", path.display()))?;
        let jwks = tributary_security::oauthbearer::Jwks::parse(&bytes).map_err(|e| {
            anyhow!(
                "config {url_key}: {} is not a usable JWKS: {e}",
                path.display()
            )
        })?;
        let list = |k: &str| -> Vec<String> {
            cfg.values[k]
                .0
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        let issuer = cfg.values["sasl.oauthbearer.expected.issuer"]
            .0
            .trim()
            .to_string();
        let sub_claim = cfg.values["sasl.oauthbearer.sub.claim.name"]
            .0
            .trim()
            .to_string();
        if sub_claim.is_empty() {
            bail!("config sasl.oauthbearer.sub.claim.name is empty; set the claim naming the principal (Kafka's default: sub)");
        }
        let skew: i64 = parse_num(
            "sasl.oauthbearer.clock.skew.seconds",
            &cfg.values["sasl.oauthbearer.clock.skew.seconds"].0,
            0,
        )?;
        out.insert(
            l.name.clone(),
            Arc::new(tributary_security::oauthbearer::SignedValidator {
                jwks,
                audience: list("sasl.oauthbearer.expected.audience"),
                issuer: (!issuer.is_empty()).then_some(issuer),
                sub_claim,
                clock_skew_ms: skew.saturating_mul(1000),
            }),
        );
    }
    Ok(out)
}

/// `replica.link.timeout.ms`: 0 (the kernel's defaults) or at least [`LINK_TIMEOUT_MIN_MS`].
fn parse_link_timeout(v: &str) -> Result<u64> {
    let key = "replica.link.timeout.ms";
    let ms = u64::from(parse_num::<i32>(key, v, 0)?.unsigned_abs());
    if ms != 0 && ms < LINK_TIMEOUT_MIN_MS {
        bail!("config {key}: {ms} is below {LINK_TIMEOUT_MIN_MS}; a link that times out after a few lost packets would drop healthy followers. Use 0 for the kernel's defaults, or at least {LINK_TIMEOUT_MIN_MS}");
    }
    Ok(ms)
}

/// The shortest `replica.link.timeout.ms`: TCP retransmits a lost segment after 200 ms at the
/// earliest, then 400 ms later, so below a second one unlucky loss could end a healthy link.
const LINK_TIMEOUT_MIN_MS: u64 = 1000;

/// Kafka's two checks on `replica.fetch.wait.max.ms`: a leader holding a fetch longer than the
/// follower waits for the answer would time the fetch out, and longer than the lag window would
/// make an idle follower look out of sync.
fn check_replica_fetch_wait(cfg: &BrokerConfig) -> Result<()> {
    let wait = u64::from(cfg.replica_fetch_wait_max_ms.unsigned_abs());
    if wait > cfg.replica_socket_timeout_ms {
        bail!(
            "config replica.fetch.wait.max.ms: {wait} is above replica.socket.timeout.ms {}; a leader holding a fetch that long would see it given up. Lower it, or raise replica.socket.timeout.ms",
            cfg.replica_socket_timeout_ms
        );
    }
    if wait > cfg.replica_lag_time_max_ms {
        bail!(
            "config replica.fetch.wait.max.ms: {wait} is above replica.lag.time.max.ms {}; an idle follower would leave the ISR while its fetch waits. Lower it, or raise replica.lag.time.max.ms",
            cfg.replica_lag_time_max_ms
        );
    }
    Ok(())
}

/// A broker key AlterConfigs may change while the broker runs (Kafka's "cluster-wide" dynamic
/// update mode), restricted to keys whose new value Tributary applies at once: each reaches the
/// shards with the catalog snapshot and is read through `Shard::broker_config()`. Every other key
/// is read-only. Making a key dynamic is one entry here, with code that reads the key from
/// `Shard::broker_config()` per use.
pub struct DynamicKey {
    pub name: &'static str,
    /// The values accepted; `None`: those of the topic key this one is the default of.
    pub bound: Option<(ConfigKind, Bound)>,
    /// Sets the typed field of the effective config from a value that passed `bound`.
    pub apply: fn(&mut BrokerConfig, &str) -> std::result::Result<(), String>,
}

/// Parses a value that passed its bound into a typed field.
fn set<T: std::str::FromStr>(field: &mut T, key: &str, v: &str) -> std::result::Result<(), String> {
    *field = v
        .trim()
        .parse()
        .map_err(|_| format!("config {key}: {v:?} is out of range"))?;
    Ok(())
}

/// `max.connections.per.ip.overrides` changed at runtime: IP addresses only, since resolving a
/// host name would block the shard that applies it.
fn parse_ip_overrides_dynamic(
    v: &str,
) -> std::result::Result<Vec<(std::net::IpAddr, usize)>, String> {
    let mut out = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (host, count) = entry
            .rsplit_once(':')
            .ok_or_else(|| format!("{entry:?} is not ip:count"))?;
        let ip = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{host:?} is not an IP address (host names are resolved only at start, from --config or --set)"))?;
        let count = count
            .trim()
            .parse()
            .map_err(|_| format!("{count:?} is not a connection count"))?;
        out.push((ip, count));
    }
    Ok(out)
}

/// The `apply` of a key accepted for Kafka's tools and kept without effect (its BrokerKey's
/// documentation says why Tributary does not use it).
fn kept_unused(_: &mut BrokerConfig, _: &str) -> std::result::Result<(), String> {
    Ok(())
}

pub const DYNAMIC_BROKER_KEYS: &[DynamicKey] = &[
    DynamicKey {
        name: "max.connections",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: |c, v| set(&mut c.max_connections, "max.connections", v),
    },
    DynamicKey {
        name: "max.connections.per.ip",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: |c, v| set(&mut c.max_connections_per_ip, "max.connections.per.ip", v),
    },
    DynamicKey {
        name: "max.connections.per.ip.overrides",
        bound: Some((
            ConfigKind::String,
            Bound::Parsed(|v| parse_ip_overrides_dynamic(v).map(|_| ())),
        )),
        apply: |c, v| {
            c.max_connections_per_ip_overrides = parse_ip_overrides_dynamic(v)?;
            Ok(())
        },
    },
    DynamicKey {
        name: "unclean.leader.election.enable",
        bound: None,
        apply: |c, v| {
            c.unclean_leader_election_enable =
                parse_bool("unclean.leader.election.enable", v.trim())
                    .map_err(|e| e.to_string())?;
            Ok(())
        },
    },
    DynamicKey {
        name: "message.max.bytes",
        bound: None,
        apply: |c, v| set(&mut c.message_max_bytes, "message.max.bytes", v),
    },
    DynamicKey {
        name: "compression.type",
        bound: None,
        apply: |c, v| {
            c.compression_type =
                parse_compression_type("compression.type", v.trim()).map_err(|e| e.to_string())?;
            Ok(())
        },
    },
    DynamicKey {
        name: "log.message.timestamp.type",
        bound: None,
        apply: |c, v| {
            c.log_message_timestamp_log_append_time =
                parse_timestamp_type("log.message.timestamp.type", v.trim())
                    .map_err(|e| e.to_string())?;
            Ok(())
        },
    },
    DynamicKey {
        name: "log.message.timestamp.before.max.ms",
        bound: None,
        apply: |c, v| {
            set(
                &mut c.log_message_timestamp_before_max_ms,
                "log.message.timestamp.before.max.ms",
                v,
            )
        },
    },
    DynamicKey {
        name: "log.message.timestamp.after.max.ms",
        bound: None,
        apply: |c, v| {
            set(
                &mut c.log_message_timestamp_after_max_ms,
                "log.message.timestamp.after.max.ms",
                v,
            )
        },
    },
    DynamicKey {
        name: "producer.id.expiration.ms",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: |c, v| {
            set(
                &mut c.producer_id_expiration_ms,
                "producer.id.expiration.ms",
                v,
            )
        },
    },
    DynamicKey {
        name: "log.segment.bytes",
        bound: None,
        apply: |c, v| set(&mut c.log_segment_bytes, "log.segment.bytes", v),
    },
    DynamicKey {
        name: "log.roll.ms",
        bound: None,
        apply: |c, v| set(&mut c.log_roll_ms, "log.roll.ms", v),
    },
    DynamicKey {
        name: "log.retention.ms",
        bound: None,
        apply: |c, v| set(&mut c.log_retention_ms, "log.retention.ms", v),
    },
    DynamicKey {
        name: "log.retention.bytes",
        bound: None,
        apply: |c, v| set(&mut c.log_retention_bytes, "log.retention.bytes", v),
    },
    DynamicKey {
        name: "log.index.interval.bytes",
        bound: None,
        apply: |c, v| {
            set(
                &mut c.log_index_interval_bytes,
                "log.index.interval.bytes",
                v,
            )
        },
    },
    DynamicKey {
        name: "log.flush.interval.messages",
        bound: None,
        apply: |c, v| {
            set(
                &mut c.log_flush_interval_messages,
                "log.flush.interval.messages",
                v,
            )
        },
    },
    DynamicKey {
        name: "log.flush.interval.ms",
        bound: None,
        apply: |c, v| set(&mut c.log_flush_interval_ms, "log.flush.interval.ms", v),
    },
    DynamicKey {
        name: "log.cleaner.delete.retention.ms",
        bound: None,
        apply: |c, v| {
            set(
                &mut c.cleaner.log_cleaner_delete_retention_ms,
                "log.cleaner.delete.retention.ms",
                v,
            )
        },
    },
    DynamicKey {
        name: "log.cleaner.min.cleanable.ratio",
        bound: None,
        apply: |c, v| {
            set(
                &mut c.cleaner.log_cleaner_min_cleanable_ratio,
                "log.cleaner.min.cleanable.ratio",
                v,
            )
        },
    },
    DynamicKey {
        name: "log.cleaner.dedupe.buffer.size",
        bound: Some((ConfigKind::Long, Bound::AtLeast(1 << 20))),
        apply: |c, v| {
            set(
                &mut c.cleaner.log_cleaner_dedupe_buffer_size,
                "log.cleaner.dedupe.buffer.size",
                v,
            )
        },
    },
    DynamicKey {
        name: "sasl.kerberos.service.name",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.kerberos.kinit.cmd",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.kerberos.ticket.renew.window.factor",
        bound: Some((ConfigKind::Double, Bound::Ratio)),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.kerberos.ticket.renew.jitter",
        bound: Some((ConfigKind::Double, Bound::Ratio)),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.kerberos.min.time.before.relogin",
        bound: Some((ConfigKind::Long, Bound::AtLeast(0))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.kerberos.principal.to.local.rules",
        bound: Some((ConfigKind::List, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.login.refresh.window.factor",
        bound: Some((ConfigKind::Double, Bound::Ratio)),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.login.refresh.window.jitter",
        bound: Some((ConfigKind::Double, Bound::Ratio)),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.login.refresh.min.period.seconds",
        bound: Some((ConfigKind::Int, Bound::Between(0, 900))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "sasl.login.refresh.buffer.seconds",
        bound: Some((ConfigKind::Int, Bound::Between(0, 3600))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "num.io.threads",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "num.network.threads",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "num.replica.fetchers",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "num.recovery.threads.per.data.dir",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "background.threads",
        bound: Some((ConfigKind::Int, Bound::AtLeast(1))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "log.cleaner.threads",
        bound: Some((ConfigKind::Int, Bound::AtLeast(0))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "log.cleaner.dedupe.buffer.load.factor",
        bound: Some((ConfigKind::Double, Bound::Ratio)),
        apply: kept_unused,
    },
    DynamicKey {
        name: "log.cleaner.io.buffer.size",
        bound: Some((ConfigKind::Int, Bound::AtLeast(0))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "log.cleaner.io.max.bytes.per.second",
        bound: Some((ConfigKind::Double, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "metric.reporters",
        bound: Some((ConfigKind::List, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "max.connection.creation.rate",
        bound: Some((ConfigKind::Int, Bound::AtLeast(0))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "principal.builder.class",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "ssl.engine.factory.class",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "ssl.provider",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "ssl.secure.random.implementation",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "ssl.keymanager.algorithm",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
    DynamicKey {
        name: "ssl.trustmanager.algorithm",
        bound: Some((ConfigKind::String, Bound::Parsed(|_| Ok(())))),
        apply: kept_unused,
    },
];

fn dynamic_key(key: &str) -> Option<&'static DynamicKey> {
    DYNAMIC_BROKER_KEYS.iter().find(|d| d.name == key)
}

pub fn is_dynamic(key: &str) -> bool {
    dynamic_key(key).is_some() || is_reloadable_ssl_key(key)
}

/// Whether `key` is one of [`SSL_RELOADABLE_KEYS`], for the broker or one listener.
pub fn is_reloadable_ssl_key(key: &str) -> bool {
    ssl_key(key).is_some_and(|(k, _)| SSL_RELOADABLE_KEYS.contains(&k))
}

/// Checks a reloadable `ssl.*` value without reading the file it names (the controller loads
/// the keystore before the change is stored).
fn validate_ssl_dynamic(key: &str, value: &str) -> std::result::Result<(), String> {
    let Some((ssl, _)) = ssl_key(key) else {
        return Err(format!("unknown broker config {key:?}"));
    };
    if !SSL_RELOADABLE_KEYS.contains(&ssl) {
        return Err(format!(
            "{key} cannot be changed while the broker runs (reloadable: {}); to serve another certificate, write its chain and key to a PEM file and alter ssl.keystore.location (or listener.name.NAME.ssl.keystore.location) to it",
            SSL_RELOADABLE_KEYS.join(", ")
        ));
    }
    let value = value.trim();
    match ssl {
        "ssl.keystore.type" | "ssl.truststore.type"
            if !value.eq_ignore_ascii_case(SSL_STORE_TYPE) =>
        {
            Err(format!(
                "{key}={value}: only {SSL_STORE_TYPE} stores are supported"
            ))
        }
        "ssl.allow.dn.changes" | "ssl.allow.san.changes" => parse_bool(key, value)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        _ => Ok(()),
    }
}

/// Checks a dynamic broker config value; the error names the key and the allowed values.
pub fn validate_dynamic(key: &str, value: &str) -> std::result::Result<(), String> {
    use crate::topic_config::{check_value, TOPIC_KEYS};
    if ssl_key(key).is_some() {
        return validate_ssl_dynamic(key, value);
    }
    let Some(d) = dynamic_key(key) else {
        return Err(match BROKER_KEYS.iter().any(|k| k.name == key) {
            true => format!("{key} is read-only: it cannot be changed while the broker runs (set it with --config or --set and restart)"),
            false => format!("unknown broker config {key:?}"),
        });
    };
    let bound = d.bound.or_else(|| {
        TOPIC_KEYS
            .iter()
            .find(|t| t.broker_key == Some(key))
            .map(|t| (t.kind, t.bound))
    });
    match bound {
        Some((kind, bound)) => check_value(key, kind, bound, value),
        None => Err(format!("{key} has no bound: give its DynamicKey one")),
    }
}

impl BrokerConfig {
    /// This (static) config with dynamic values applied in order: cluster defaults, then this
    /// broker's own. A value that fails [`validate_dynamic`] is an error.
    pub fn with_dynamic(
        &self,
        layers: &[&BTreeMap<String, String>],
    ) -> std::result::Result<BrokerConfig, String> {
        let mut c = self.clone();
        for layer in layers {
            for (k, v) in layer.iter() {
                validate_dynamic(k, v)?;
                if let Some((ssl, listener)) = ssl_key(k) {
                    match listener {
                        Some(_) => {
                            c.listener_props.insert(k.clone(), v.trim().to_string());
                        }
                        None => {
                            c.values.insert(ssl, (v.trim().to_string(), true));
                        }
                    }
                    continue;
                }
                let d = dynamic_key(k).ok_or_else(|| format!("{k} is not dynamic"))?;
                (d.apply)(&mut c, v)?;
                if let Some(key) = BROKER_KEYS.iter().find(|b| b.name == k) {
                    c.values.insert(key.name, (v.trim().to_string(), true));
                }
            }
        }
        Ok(c)
    }
}

/// How rates are measured (Kafka's `quota.window.num` and `quota.window.size.seconds`): over
/// the last `samples` samples of `sample` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindow {
    pub samples: usize,
    pub sample: std::time::Duration,
}

impl Default for QuotaWindow {
    /// Kafka's defaults: 11 samples of 1 s.
    fn default() -> Self {
        Self {
            samples: 11,
            sample: std::time::Duration::from_secs(1),
        }
    }
}

impl QuotaWindow {
    /// The whole window; also the longest a single response throttles its connection for a
    /// byte rate, as Kafka's `ClientQuotaManager` bounds it.
    pub fn span(&self) -> std::time::Duration {
        self.sample.saturating_mul(saturating_u32(self.samples))
    }

    /// The longest a single response throttles its connection for its request time: Kafka's
    /// `ClientRequestQuotaManager` bounds it by one sample, so a client past its quota by a
    /// burst comes back within a sample and is measured again.
    pub fn request_throttle_max(&self) -> std::time::Duration {
        self.sample
    }
}
/// `n` as a multiplier of a duration (whatever `quota.window.num` an operator set).
pub(crate) fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Unit tests' config input: `props` over the defaults, data in `./data`, `--listen`
/// 127.0.0.1:9092.
#[cfg(test)]
impl ConfigInput {
    pub(crate) fn for_test(props: &[(&str, &str)]) -> ConfigInput {
        ConfigInput {
            data_dir: "./data".into(),
            listen: "127.0.0.1:9092".into(),
            advertised_listener: None,
            cores: None,
            cpus: None,
            numa_node: None,
            properties: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(props: &[(&str, &str)]) -> ConfigInput {
        ConfigInput::for_test(props)
    }

    #[test]
    fn quota_windows_and_the_idle_pool_take_their_bounds() {
        let c = BrokerConfig::build(input(&[
            ("quota.window.num", "3"),
            ("quota.window.size.seconds", "2"),
            ("inter.broker.connections.idle.max", "0"),
        ]))
        .unwrap();
        assert_eq!(
            c.quota_window,
            QuotaWindow {
                samples: 3,
                sample: std::time::Duration::from_secs(2)
            }
        );
        assert_eq!(c.inter_broker_connections_idle_max, 0);
        for (key, value) in [
            ("quota.window.num", "0"),
            ("quota.window.size.seconds", "0"),
            ("quota.window.num", "many"),
            ("inter.broker.connections.idle.max", "-1"),
        ] {
            let e = BrokerConfig::build(input(&[(key, value)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{key}={value}: {e}");
        }
    }

    #[test]
    fn a_signed_oauthbearer_listener_needs_a_usable_jwks_file() {
        let dir = std::env::temp_dir().join(format!("trib-jwks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.json");
        std::fs::write(
            &good,
            r#"{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}"#,
        )
        .unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{}").unwrap();
        let class_key =
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class";
        let build = |class: &str, url: &str, mechanisms: &str| {
            BrokerConfig::build(input(&[
                ("listeners", "SASL_PLAINTEXT://127.0.0.1:9092"),
                ("sasl.enabled.mechanisms", mechanisms),
                (class_key, class),
                ("sasl.oauthbearer.jwks.endpoint.url", url),
            ]))
        };
        let kafka = OAUTH_VALIDATOR_CLASSES[0];
        let url = |p: &std::path::Path| format!("file://{}", p.display());
        let c = build(kafka, &url(&good), "OAUTHBEARER").unwrap();
        assert_eq!(c.oauth_validators["SASL_PLAINTEXT"].jwks.len(), 1);
        assert_eq!(c.oauth_validators["SASL_PLAINTEXT"].sub_claim, "sub");
        // Kafka before 3.4 named it under `secured`.
        assert!(build(OAUTH_VALIDATOR_CLASSES[1], &url(&good), "OAUTHBEARER").is_ok());
        for (class, u, mechanisms, want) in [
            (
                "com.example.Mine",
                url(&good),
                "OAUTHBEARER",
                "not a validator",
            ),
            (kafka, String::new(), "OAUTHBEARER", "is not set"),
            (
                kafka,
                "https://idp.example/jwks".into(),
                "OAUTHBEARER",
                "only a file URL",
            ),
            (
                kafka,
                url(&dir.join("missing.json")),
                "OAUTHBEARER",
                "cannot read",
            ),
            (kafka, url(&bad), "OAUTHBEARER", "not a usable JWKS"),
            (
                kafka,
                url(&good),
                "SCRAM-SHA-256",
                "not in sasl.enabled.mechanisms",
            ),
        ] {
            let e = build(class, &u, mechanisms).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
        // Without the class, the listener takes unsecured tokens (Kafka's default).
        let c = BrokerConfig::build(input(&[
            ("listeners", "SASL_PLAINTEXT://127.0.0.1:9092"),
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
        ]))
        .unwrap();
        assert!(c.oauth_validators.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reloadable_ssl_keys_change_per_listener_and_inline_keys_do_not() {
        assert_eq!(
            ssl_key("ssl.keystore.location"),
            Some(("ssl.keystore.location", None))
        );
        assert_eq!(
            ssl_key("listener.name.ssl.ssl.truststore.location"),
            Some(("ssl.truststore.location", Some("ssl")))
        );
        assert_eq!(ssl_key("listener.name..ssl.keystore.location"), None);
        assert_eq!(ssl_key("log.segment.bytes"), None);
        assert!(is_dynamic("listener.name.external.ssl.keystore.location"));
        assert!(validate_dynamic("ssl.keystore.location", "/etc/new.pem").is_ok());
        let e = validate_dynamic("listener.name.ssl.ssl.keystore.type", "JKS").unwrap_err();
        assert!(e.contains("only PEM"), "{e}");
        let e = validate_dynamic("ssl.allow.dn.changes", "maybe").unwrap_err();
        assert!(e.contains("true or false"), "{e}");
        let e = validate_dynamic("listener.name.ssl.ssl.keystore.key", "KEY").unwrap_err();
        assert!(e.contains("alter ssl.keystore.location"), "{e}");
        assert!(!e.contains("KEY\""), "the value is not echoed: {e}");
        let e = validate_dynamic("ssl.client.auth", "required").unwrap_err();
        assert!(e.contains("cannot be changed while the broker runs"), "{e}");
        // Applied: the listener's key to its listener, the broker's to every listener without one.
        let c = BrokerConfig::build(input(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,B://127.0.0.1:9094",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SSL:SSL,B:SSL",
            ),
            ("ssl.keystore.location", "/etc/static.pem"),
        ]))
        .unwrap();
        let layer: BTreeMap<String, String> = [
            ("listener.name.b.ssl.keystore.location", "/etc/b.pem"),
            ("ssl.truststore.location", "/etc/ca.pem"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let d = c.with_dynamic(&[&layer]).unwrap();
        let b = d.listener_tls("B").unwrap().settings;
        assert_eq!(b.keystore_location, Some(PathBuf::from("/etc/b.pem")));
        assert_eq!(b.truststore_location, Some(PathBuf::from("/etc/ca.pem")));
        let ssl = d.listener_tls("SSL").unwrap().settings;
        assert_eq!(
            ssl.keystore_location,
            Some(PathBuf::from("/etc/static.pem"))
        );
    }

    #[test]
    fn ssl_keys_per_listener_win_and_secrets_stay_out_of_values() {
        use tributary_security::tls::ClientAuth;
        let c = BrokerConfig::build(input(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094",
            ),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-256"),
            ("ssl.keystore.location", "/etc/broker.pem"),
            ("ssl.keystore.key", "KEY"),
            ("ssl.client.auth", "requested"),
            ("listener.name.ssl.ssl.client.auth", "REQUIRED"),
            (
                "listener.name.ssl.ssl.keystore.location",
                "/etc/ssl-listener.pem",
            ),
        ]))
        .unwrap();
        let ssl = c.listener_tls("SSL").unwrap();
        assert_eq!(ssl.settings.client_auth, ClientAuth::Required);
        assert_eq!(
            ssl.settings.keystore_location.as_deref(),
            Some(std::path::Path::new("/etc/ssl-listener.pem"))
        );
        assert_eq!(ssl.settings.keystore_key.as_deref(), Some("KEY"));
        assert_eq!(ssl.settings.principal_mapping_rules, "DEFAULT");
        assert_eq!(
            ssl.key("ssl.keystore.location"),
            "listener.name.ssl.ssl.keystore.location"
        );
        assert_eq!(
            ssl.key("ssl.truststore.location"),
            "ssl.truststore.location"
        );
        let sasl_ssl = c.listener_tls("SASL_SSL").unwrap();
        assert_eq!(sasl_ssl.settings.client_auth, ClientAuth::Requested);
        assert_eq!(
            sasl_ssl.settings.keystore_location.as_deref(),
            Some(std::path::Path::new("/etc/broker.pem"))
        );
        assert!(!c.values.contains_key("ssl.keystore.key"));
        assert!(!format!("{c:?}").contains("KEY\""));
        let e = BrokerConfig::build(input(&[
            ("listeners", "SSL://127.0.0.1:9093"),
            ("ssl.principal.mapping.rules", "RULE:broken"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("ssl.principal.mapping.rules"), "{e}");
        let e = BrokerConfig::build(input(&[("listener.name.ssl.ssl.cipher.suites", "x")]))
            .unwrap_err();
        assert!(e.to_string().contains("listener.name.NAME.KEY"), "{e}");
    }

    #[test]
    fn defaults_and_overrides() {
        let c = BrokerConfig::build(input(&[("num.partitions", "8")])).unwrap();
        assert_eq!(c.num_partitions, 8);
        assert_eq!(c.message_max_bytes, 1_048_588);
        assert!(c.auto_create_topics);
        assert_eq!(c.advertised_port, 9092);
    }

    #[test]
    fn retention_and_roll_take_the_finest_unit_set() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.log_retention_ms, 168 * 3_600_000);
        assert_eq!(c.log_roll_ms, 168 * 3_600_000);
        assert_eq!(c.log_flush_interval_messages, 1);
        let c = BrokerConfig::build(input(&[
            ("log.retention.hours", "1"),
            ("log.retention.minutes", "5"),
            ("log.roll.hours", "2"),
        ]))
        .unwrap();
        assert_eq!(c.log_retention_ms, 300_000);
        assert_eq!(c.log_roll_ms, 7_200_000);
        let c = BrokerConfig::build(input(&[
            ("log.retention.minutes", "5"),
            ("log.retention.ms", "-1"),
            ("log.roll.ms", "1000"),
        ]))
        .unwrap();
        assert_eq!(c.log_retention_ms, -1);
        assert_eq!(c.log_roll_ms, 1000);
        let e = BrokerConfig::build(input(&[("log.flush.interval.messages", "0")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("log.flush.interval.messages"), "{e}");
    }

    #[test]
    fn connection_limits_and_the_request_budget() {
        let c = BrokerConfig::build(input(&[
            (
                "max.connections.per.ip.overrides",
                "127.0.0.2:5, [::1]:7,localhost:3",
            ),
            ("queued.max.request.bytes", "-1"),
        ]))
        .unwrap();
        let o = &c.max_connections_per_ip_overrides;
        assert!(o.contains(&("127.0.0.2".parse().unwrap(), 5)), "{o:?}");
        assert!(o.contains(&("::1".parse().unwrap(), 7)), "{o:?}");
        assert!(o.iter().any(|(ip, n)| ip.is_loopback() && *n == 3), "{o:?}");
        assert_eq!(c.queued_max_request_bytes, None);
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.queued_max_request_bytes, Some(134_217_728));
        assert_eq!(c.connections_max_idle_ms, 600_000);
        let e = BrokerConfig::build(input(&[("queued.max.request.bytes", "1048576")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("queued.max.request.bytes") && e.contains("socket.request.max.bytes"),
            "{e}"
        );
        let e = BrokerConfig::build(input(&[("max.connections.per.ip.overrides", "10.0.0.1")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("max.connections.per.ip.overrides"), "{e}");
    }

    #[test]
    fn record_policy_keys_parse_and_refuse_other_values() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.compression_type, None);
        assert!(!c.log_message_timestamp_log_append_time);
        assert_eq!(c.log_message_timestamp_before_max_ms, i64::MAX);
        assert_eq!(c.log_message_timestamp_after_max_ms, 3_600_000);
        let c = BrokerConfig::build(input(&[
            ("compression.type", "zstd"),
            ("log.message.timestamp.type", "LogAppendTime"),
            ("log.message.timestamp.after.max.ms", "0"),
        ]))
        .unwrap();
        assert_eq!(c.compression_type, Some(4));
        assert!(c.log_message_timestamp_log_append_time);
        assert_eq!(c.log_message_timestamp_after_max_ms, 0);
        for (key, bad) in [
            ("compression.type", "brotli"),
            ("log.message.timestamp.type", "Now"),
            ("log.message.timestamp.before.max.ms", "-1"),
        ] {
            let e = BrokerConfig::build(input(&[(key, bad)])).unwrap_err();
            assert!(format!("{e:#}").contains(key), "{e:#}");
        }
    }

    #[test]
    fn producer_state_limits_default_to_kafka_and_refuse_zero() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.producer_id_expiration_ms, 86_400_000);
        assert_eq!(c.producer_state_partition_max_producers, 10_000);
        for key in [
            "producer.id.expiration.ms",
            "producer.state.partition.max.producers",
        ] {
            let e = BrokerConfig::build(input(&[(key, "0")]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{e}");
        }
        // An INT in Kafka: past i32 is out of range.
        assert!(
            BrokerConfig::build(input(&[("producer.id.expiration.ms", "2147483648")])).is_err()
        );
    }

    #[test]
    fn connection_handover_defaults_to_16_takes_0_and_refuses_negatives() {
        let key = "connection.handover.produce.requests";
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.connection_handover_produce_requests, 16);
        let off = BrokerConfig::build(input(&[(key, "0")])).unwrap();
        assert_eq!(off.connection_handover_produce_requests, 0);
        for bad in ["-1", "many", "4294967296"] {
            let e = BrokerConfig::build(input(&[(key, bad)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = BrokerConfig::build(input(&[("num.partitons", "8")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("num.partitons"), "{e}");
        let e = BrokerConfig::build(input(&[("auto.create.topics.enable", "yes")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("auto.create.topics.enable"), "{e}");
        let e = BrokerConfig::build(input(&[("message.max.bytes", "-5")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("message.max.bytes"), "{e}");
    }

    #[test]
    fn dynamic_values_override_static_ones_broker_last() {
        let c = BrokerConfig::build(input(&[("log.retention.hours", "1")])).unwrap();
        let cluster: BTreeMap<String, String> = [
            ("log.retention.ms".to_string(), "5000".to_string()),
            ("log.segment.bytes".to_string(), "4096".to_string()),
        ]
        .into();
        let broker: BTreeMap<String, String> =
            [("log.retention.ms".to_string(), "7000".to_string())].into();
        let d = c.with_dynamic(&[&cluster, &broker]).unwrap();
        assert_eq!(d.log_retention_ms, 7000);
        assert_eq!(d.log_segment_bytes, 4096);
        assert_eq!(
            c.log_retention_ms, 3_600_000,
            "the static config is untouched"
        );
        assert_eq!(d.values["log.segment.bytes"], ("4096".to_string(), true));
        let e = validate_dynamic("log.segment.bytes", "12").unwrap_err();
        assert!(e.contains("log.segment.bytes") && e.contains("1024"), "{e}");
        let e = validate_dynamic("node.id", "3").unwrap_err();
        assert!(e.contains("read-only"), "{e}");
        assert!(validate_dynamic("no.such.key", "3").is_err());
        let bad: BTreeMap<String, String> =
            [("num.partitions".to_string(), "3".to_string())].into();
        assert!(c.with_dynamic(&[&bad]).is_err());
    }

    #[test]
    fn unclean_leader_election_is_off_by_default_and_dynamic() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert!(!c.unclean_leader_election_enable);
        let c = BrokerConfig::build(input(&[("unclean.leader.election.enable", "true")])).unwrap();
        assert!(c.unclean_leader_election_enable);
        let e = BrokerConfig::build(input(&[("unclean.leader.election.enable", "yes")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unclean.leader.election.enable"), "{e}");
        // Kafka lets it change cluster-wide while the brokers run.
        let off: BTreeMap<String, String> = [(
            "unclean.leader.election.enable".to_string(),
            "false".to_string(),
        )]
        .into();
        assert!(
            !c.with_dynamic(&[&off])
                .unwrap()
                .unclean_leader_election_enable
        );
        let e = validate_dynamic("unclean.leader.election.enable", "maybe").unwrap_err();
        assert!(e.contains("unclean.leader.election.enable"), "{e}");
    }

    #[test]
    fn replica_fetch_keys_default_as_kafka_and_are_bounded() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.replica_fetch_max_bytes, 1_048_576);
        assert_eq!(c.replica_fetch_wait_max_ms, 500);
        assert_eq!(c.replica_socket_timeout_ms, 30_000);
        let c = BrokerConfig::build(input(&[
            ("replica.fetch.max.bytes", "65536"),
            ("replica.fetch.wait.max.ms", "2000"),
            ("replica.socket.timeout.ms", "2000"),
        ]))
        .unwrap();
        assert_eq!(
            (
                c.replica_fetch_max_bytes,
                c.replica_fetch_wait_max_ms,
                c.replica_socket_timeout_ms
            ),
            (65_536, 2000, 2000)
        );
        for (key, bad) in [
            ("replica.fetch.max.bytes", "0"),
            ("replica.fetch.max.bytes", "2147483648"),
            ("replica.fetch.wait.max.ms", "0"),
            ("replica.socket.timeout.ms", "0"),
            ("replica.socket.timeout.ms", "-5"),
            ("replica.socket.timeout.ms", "soon"),
            ("replica.fetch.silence.max.ms", "-1"),
            ("replica.fetch.silence.max.ms", "soon"),
            ("replica.link.timeout.ms", "-1"),
            ("replica.link.timeout.ms", "999"),
            ("replica.link.timeout.ms", "soon"),
            ("replica.backlog.max.bytes", "-1"),
            ("replica.backlog.max.bytes", "lots"),
        ] {
            let e = BrokerConfig::build(input(&[(key, bad)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{key}={bad}: {e}");
        }
        // A leader may not hold a fetch past the follower's timeout, nor past the lag window.
        let e = BrokerConfig::build(input(&[("replica.socket.timeout.ms", "400")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("replica.fetch.wait.max.ms") && e.contains("replica.socket.timeout.ms"),
            "{e}"
        );
        let e = BrokerConfig::build(input(&[
            ("replica.lag.time.max.ms", "300"),
            ("replica.fetch.wait.max.ms", "301"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("replica.fetch.wait.max.ms") && e.contains("replica.lag.time.max.ms"),
            "{e}"
        );
        // A long fetch wait raises the silence window instead of refusing to start; 0 is off.
        let rules = |kv: &[(&str, &str)]| {
            crate::replica::leader::isr_rules(&BrokerConfig::build(input(kv)).unwrap()).silence_max
        };
        assert_eq!(rules(&[]), Some(std::time::Duration::from_secs(5)));
        assert_eq!(
            rules(&[("replica.fetch.wait.max.ms", "5000")]),
            Some(std::time::Duration::from_secs(10))
        );
        assert_eq!(rules(&[("replica.fetch.silence.max.ms", "0")]), None);
        let link = |kv: &[(&str, &str)]| {
            BrokerConfig::build(input(kv))
                .unwrap()
                .replica_link_timeout_ms
        };
        assert_eq!(link(&[]), 2000);
        assert_eq!(link(&[("replica.link.timeout.ms", "0")]), 0);
        assert_eq!(link(&[("replica.link.timeout.ms", "1000")]), 1000);
        let backlog = |kv: &[(&str, &str)]| {
            crate::replica::leader::replica_backlog_max_bytes(
                &BrokerConfig::build(input(kv)).unwrap(),
            )
        };
        assert_eq!(backlog(&[]), 1_048_576);
        assert_eq!(backlog(&[("replica.fetch.max.bytes", "65536")]), 65_536);
        assert_eq!(backlog(&[("replica.backlog.max.bytes", "0")]), 0);
        assert_eq!(
            backlog(&[("replica.backlog.max.bytes", "4194304")]),
            4_194_304
        );
    }

    #[test]
    fn max_broker_partitions_is_a_positive_int() {
        assert_eq!(
            BrokerConfig::build(input(&[]))
                .unwrap()
                .max_broker_partitions,
            100_000
        );
        for bad in ["0", "2147483648", "many"] {
            let e = BrokerConfig::build(input(&[("max.broker.partitions", bad)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains("max.broker.partitions"), "{e}");
        }
    }

    #[test]
    fn properties_and_cpu_lists() {
        let p = parse_properties("# c\nnum.partitions = 3\n\nnode.id:2\n").unwrap();
        assert_eq!(
            p,
            vec![
                ("num.partitions".into(), "3".into()),
                ("node.id".into(), "2".into())
            ]
        );
        assert!(parse_properties("garbage").is_err());
        assert_eq!(parse_cpu_list("0,2-4").unwrap(), vec![0, 2, 3, 4]);
        assert!(parse_cpu_list("4-2").is_err());
    }

    #[test]
    fn numa_node_selection_errors_name_their_source() {
        let numa = |node: Option<usize>, cpus: Option<&str>, props: &[(&str, &str)]| {
            let mut i = input(props);
            i.numa_node = node;
            i.cpus = cpus.map(str::to_string);
            BrokerConfig::build(i).map(|c| c.cpus)
        };
        let e = numa(Some(0), Some("0"), &[]).unwrap_err().to_string();
        assert!(e.contains("--numa-node 0 and --cpus"), "{e}");
        let e = numa(None, Some("0"), &[("numa.node", "0")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("config numa.node=0 and --cpus"), "{e}");
        let e = numa(None, None, &[("numa.node", "first")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("numa.node") && e.contains("not a whole number"),
            "{e}"
        );
        // No machine has this many nodes: the error lists the ones it has.
        let e = numa(Some(100_000), None, &[]).unwrap_err().to_string();
        assert!(
            e.starts_with("--numa-node 100000: no such NUMA node") && e.contains("node 0 (CPUs"),
            "{e}"
        );
        // The flag wins over the key.
        let e = numa(Some(100_000), None, &[("numa.node", "0")])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--numa-node 100000"), "{e}");
    }

    #[test]
    fn cpu_lists_name_the_flag() {
        let e = parse_cpu_list("0-x").unwrap_err().to_string();
        assert!(
            e.contains("--cpus \"0-x\"") && e.contains("bad entry"),
            "{e}"
        );
        assert!(parse_cpu_list(" , ")
            .unwrap_err()
            .to_string()
            .contains("no CPUs"));
    }

    #[test]
    fn fetch_limits_default_as_kafka_and_are_bounded() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.fetch_max_bytes, 57_671_680);
        assert_eq!(c.max_incremental_fetch_session_cache_slots, 1000);
        // Kafka's lower bound for fetch.max.bytes is 1024.
        let e = BrokerConfig::build(input(&[("fetch.max.bytes", "1000")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fetch.max.bytes"), "{e}");
        let c = BrokerConfig::build(input(&[("max.incremental.fetch.session.cache.slots", "0")]))
            .unwrap();
        assert_eq!(c.max_incremental_fetch_session_cache_slots, 0);
    }
}
