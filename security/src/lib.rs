//! Security for the broker, kept free of the runtime and the broker's state so each part is
//! tested alone: SASL mechanisms (PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER with unsecured
//! tokens, the server side, and the salted credentials SCRAM stores), the JAAS-style listener configs Kafka users write, TLS (rustls
//! over any async byte stream, the principal taken from the client's certificate), and the ACL
//! authorizer with Kafka's semantics.

pub mod acl;
pub mod client_properties;
pub mod jaas;
pub mod oauthbearer;
pub mod plain;
pub mod sasl_client;
pub mod scram;
pub mod tls;
