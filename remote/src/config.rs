//! Where the store is and how to reach it (the broker's `remote.log.storage.*` keys).

use std::path::PathBuf;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, RetryConfig};

/// A credential: never printed, in `Debug` or anywhere else.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[hidden]")
    }
}

/// What kind of store a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// A directory on this machine (`file:///dir`).
    File(PathBuf),
    /// An S3 bucket, objects under `prefix` (`s3://bucket/prefix`).
    S3 { bucket: String, prefix: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `file:///dir` or `s3://bucket[/prefix]` (`remote.log.storage.url`).
    pub url: String,
    /// An S3-compatible endpoint (`remote.log.storage.s3.endpoint`); none: AWS's, or
    /// `AWS_ENDPOINT_URL` from the environment.
    pub endpoint: Option<String>,
    /// `remote.log.storage.s3.region`; none: `AWS_REGION` / `AWS_DEFAULT_REGION`, else us-east-1.
    pub region: Option<String>,
    /// `remote.log.storage.s3.access.key.id`; none: `AWS_ACCESS_KEY_ID` (as Kafka's S3
    /// plugins fall back to the default credential chain's environment).
    pub access_key_id: Option<String>,
    /// `remote.log.storage.s3.secret.access.key`; none: `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<Secret>,
    /// `remote.log.storage.s3.session.token`; none: `AWS_SESSION_TOKEN`.
    pub session_token: Option<Secret>,
    /// Allow `http://` endpoints (`remote.log.storage.s3.allow.http`): for a store on the same
    /// host or network, never across the internet.
    pub allow_http: bool,
    /// Store operations in flight at once (`remote.log.storage.max.inflight`).
    pub max_inflight: usize,
}

impl StoreConfig {
    /// A store in the directory `dir`.
    pub fn file(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            url: format!("file://{}", dir.into().display()),
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            allow_http: false,
            max_inflight: 8,
        }
    }

    /// What the URL names, or why it names nothing usable.
    pub fn kind(&self) -> Result<StoreKind, String> {
        if let Some(dir) = self.url.strip_prefix("file://") {
            if !dir.starts_with('/') {
                return Err(format!(
                    "remote.log.storage.url {:?}: a file:// store needs an absolute path (file:///dir)",
                    self.url
                ));
            }
            return Ok(StoreKind::File(PathBuf::from(dir)));
        }
        if let Some(rest) = self.url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!(
                    "remote.log.storage.url {:?} names no bucket (s3://bucket/prefix)",
                    self.url
                ));
            }
            return Ok(StoreKind::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            });
        }
        Err(format!(
            "remote.log.storage.url {:?}: use file:///dir or s3://bucket/prefix",
            self.url
        ))
    }

    /// The URL and endpoint, for logs (never a credential).
    pub fn describe(&self) -> String {
        match &self.endpoint {
            Some(e) => format!("{} at {e}", self.url),
            None => self.url.clone(),
        }
    }

    pub(crate) fn build(&self) -> Result<Arc<dyn ObjectStore>, String> {
        match self.kind()? {
            StoreKind::File(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| {
                    format!("creating the remote log directory {}: {e}", dir.display())
                })?;
                // Synced: a local segment is deleted once its copy is written, so the copy must
                // outlive a power loss.
                let store = LocalFileSystem::new_with_prefix(&dir).map_err(|e| {
                    format!("opening the remote log directory {}: {e}", dir.display())
                })?;
                Ok(Arc::new(store.with_fsync(true)))
            }
            StoreKind::S3 { bucket, prefix } => {
                // reqwest's TLS takes the process's rustls provider: ring, as the broker's own.
                let _ = rustls::crypto::ring::default_provider().install_default();
                // A failing store is retried by the next copy pass, not for minutes inside one
                // operation (the default retries for three), which would hold the shard's
                // other partitions' copies and a consumer's fetch.
                let retry = RetryConfig {
                    max_retries: 3,
                    retry_timeout: std::time::Duration::from_secs(20),
                    ..RetryConfig::default()
                };
                let mut b = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_allow_http(self.allow_http)
                    .with_retry(retry);
                if let Some(e) = &self.endpoint {
                    b = b.with_endpoint(e);
                }
                if let Some(r) = &self.region {
                    b = b.with_region(r);
                }
                if let Some(k) = &self.access_key_id {
                    b = b.with_access_key_id(k);
                }
                if let Some(s) = &self.secret_access_key {
                    b = b.with_secret_access_key(s.expose());
                }
                if let Some(t) = &self.session_token {
                    b = b.with_token(t.expose());
                }
                let s3 = b
                    .build()
                    .map_err(|e| format!("configuring the S3 store {}: {e}", self.describe()))?;
                Ok(match prefix.is_empty() {
                    true => Arc::new(s3),
                    false => Arc::new(PrefixStore::new(s3, prefix.as_str())),
                })
            }
        }
    }
}
