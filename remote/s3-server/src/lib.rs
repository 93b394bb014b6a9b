//! An S3-compatible server: `s3s-fs` (the `s3s` crate's file-backed S3 service, objects are
//! files under `ROOT/BUCKET/KEY`) over hyper, path-style, with SigV4 authentication by one
//! access key. For tests and benchmarks of tiered storage on one machine.

use std::path::Path;

pub use s3s::service::S3Service;

/// The service over the files under `root`, accepting requests signed with the one key.
pub fn service(root: &Path, access_key: &str, secret_key: &str) -> std::io::Result<S3Service> {
    let fs = s3s_fs::FileSystem::new(root)
        .map_err(|e| std::io::Error::other(format!("serving S3 from {}: {e:?}", root.display())))?;
    let mut b = s3s::service::S3ServiceBuilder::new(fs);
    b.set_auth(s3s::auth::SimpleAuth::from_single(access_key, secret_key));
    Ok(b.build())
}

/// Serves `service` on `listener` until accepting fails; each connection runs on its own
/// task of the current tokio runtime.
pub async fn serve(listener: tokio::net::TcpListener, service: S3Service) -> std::io::Result<()> {
    let http = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    loop {
        let (socket, _) = listener.accept().await?;
        let _ = socket.set_nodelay(true);
        let io = hyper_util::rt::TokioIo::new(socket);
        let conn = http.serve_connection(io, service.clone()).into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}
