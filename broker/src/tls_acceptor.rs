//! A TLS listener's acceptor, built once at start-up and shared by every shard.

use std::sync::Arc;

use futures::future::LocalBoxFuture;
use glommio::net::TcpStream;
use tributary_security::tls::{self, PrincipalMapper, TlsError, TlsSettings, TlsStream};

/// A TLS listener's handshake: the rustls server configuration built from its `ssl.*` keys at
/// start-up, and its `ssl.principal.mapping.rules`. The configuration lives inside the closure,
/// so the broker names no rustls type; every shard shares it.
#[derive(Clone)]
pub struct TlsAcceptor {
    pub(crate) accept: Arc<dyn Fn(TcpStream) -> LocalBoxFuture<'static, TlsAccepted> + Send + Sync>,
    pub(crate) mapper: Arc<PrincipalMapper>,
    /// The settings it was built from, and who its certificate says the broker is: a reload
    /// compares both with the new ones.
    pub(crate) settings: Arc<TlsSettings>,
    pub(crate) identity: Arc<tls::CertIdentity>,
}

pub(crate) type TlsAccepted = Result<TlsStream<TcpStream>, TlsError>;

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("principal_mapping_rules", &self.mapper.to_string())
            .finish_non_exhaustive()
    }
}

impl TlsAcceptor {
    /// Reads the keystore and truststore (blocking: call it at start-up, off the shards).
    pub fn new(settings: &TlsSettings) -> Result<Self, TlsError> {
        let config = tls::server_config(settings)?;
        let identity = Arc::new(tls::keystore_identity(settings)?);
        let mapper = Arc::new(settings.principal_mapper()?);
        let accept = move |stream: TcpStream| -> LocalBoxFuture<'static, TlsAccepted> {
            Box::pin(tls::accept(config.clone(), stream))
        };
        Ok(Self {
            accept: Arc::new(accept),
            mapper,
            settings: Arc::new(settings.clone()),
            identity,
        })
    }
}
