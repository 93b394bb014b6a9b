//! A real S3-compatible server on 127.0.0.1, in the test process (`tributary_s3_server`:
//! `s3s-fs` over hyper, SigV4 authentication on), for the tiered-storage tests. Objects are
//! files under `root/BUCKET/KEY`, so a test can look at and damage them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub const ACCESS_KEY: &str = "tributary-test-key";
pub const SECRET_KEY: &str = "tributary-test-secret";
pub const BUCKET: &str = "tiered";

pub struct S3Server {
    pub addr: SocketAddr,
    pub root: PathBuf,
    runtime: Option<tokio::runtime::Runtime>,
}

impl S3Server {
    /// Starts a server storing under `root`, with the bucket [`BUCKET`], on a free port.
    pub fn start(root: &Path) -> S3Server {
        std::fs::create_dir_all(root.join(BUCKET)).unwrap();
        Self::start_at(root, "127.0.0.1:0".parse().unwrap())
    }

    fn start_at(root: &Path, addr: SocketAddr) -> S3Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .expect("the S3 server's port");
        let addr = listener.local_addr().unwrap();
        let service = tributary_s3_server::service(root, ACCESS_KEY, SECRET_KEY).unwrap();
        runtime.spawn(async move {
            let _ = tributary_s3_server::serve(listener, service).await;
        });
        S3Server {
            addr,
            root: root.to_path_buf(),
            runtime: Some(runtime),
        }
    }

    /// Stops serving: connections are refused until [`S3Server::resume`].
    pub fn stop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    /// Serves again on the same port.
    pub fn resume(&mut self) {
        let again = Self::start_at(&self.root, self.addr);
        *self = again;
    }

    /// The bucket's directory: its objects are the files under it.
    pub fn bucket_dir(&self) -> PathBuf {
        self.root.join(BUCKET)
    }

    /// The broker properties pointing tiered storage at this server, objects under `prefix`.
    pub fn broker_props(&self, prefix: &str) -> Vec<(String, String)> {
        vec![
            (
                "remote.log.storage.url".into(),
                format!("s3://{BUCKET}/{prefix}"),
            ),
            (
                "remote.log.storage.s3.endpoint".into(),
                format!("http://{}", self.addr),
            ),
            ("remote.log.storage.s3.region".into(), "us-east-1".into()),
            ("remote.log.storage.s3.allow.http".into(), "true".into()),
            (
                "remote.log.storage.s3.access.key.id".into(),
                ACCESS_KEY.into(),
            ),
            (
                "remote.log.storage.s3.secret.access.key".into(),
                SECRET_KEY.into(),
            ),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
