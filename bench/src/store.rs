//! The remote log store's own throughput, for tiered storage's figures: PUTs of objects the
//! size of a segment from a file, then whole GETs of them, through the same client the broker
//! uses (`tributary_remote`); and `s3-server`, an S3-compatible server (`s3s-fs`, files under a
//! directory) to measure against on one machine.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, Result};
use serde_json::json;
use tributary_remote::{RemoteStore, Secret, StoreConfig};

#[derive(clap::Args)]
pub struct StoreArgs {
    /// `s3://BUCKET/PREFIX` or `file:///DIR`.
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub endpoint: Option<String>,
    #[arg(long)]
    pub region: Option<String>,
    #[arg(long)]
    pub allow_http: bool,
    /// Credentials; unset: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from the environment.
    #[arg(long)]
    pub access_key_id: Option<String>,
    #[arg(
        long,
        env = "TRIBUTARY_BENCH_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub secret_access_key: Option<String>,
    /// Objects written, then read.
    #[arg(long, default_value_t = 8)]
    pub objects: usize,
    /// Size of each, in MiB.
    #[arg(long, default_value_t = 64)]
    pub object_mb: usize,
    /// Operations in flight at once (the broker's `remote.log.storage.max.inflight`).
    #[arg(long, default_value_t = 8)]
    pub inflight: usize,
    /// Where the source file is written.
    #[arg(long, default_value = "./data")]
    pub dir: PathBuf,
}

pub fn measure(a: &StoreArgs) -> Result<()> {
    let config = StoreConfig {
        url: a.url.clone(),
        endpoint: a.endpoint.clone(),
        region: a.region.clone(),
        access_key_id: a.access_key_id.clone(),
        secret_access_key: a.secret_access_key.clone().map(Secret::new),
        session_token: None,
        allow_http: a.allow_http,
        max_inflight: a.inflight,
    };
    let store = RemoteStore::start(&config).map_err(|e| anyhow!(e))?;
    std::fs::create_dir_all(&a.dir)?;
    let src = a.dir.join("tributary-bench-store.src");
    let len = (a.object_mb << 20) as u64;
    let data: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
    std::fs::write(&src, &data)?;
    let keys: Vec<String> = (0..a.objects)
        .map(|i| format!("bench/object-{i}"))
        .collect();
    eprintln!(
        "PUT {} objects of {} MiB to {} ...",
        a.objects,
        a.object_mb,
        store.description()
    );
    let put = timed(|| {
        let puts = keys
            .iter()
            .map(|k| store.put_file(k.clone(), src.clone(), len));
        for r in futures::executor::block_on(futures::future::join_all(puts)) {
            r?;
        }
        Ok(())
    })?;
    eprintln!("GET them back ...");
    let get = timed(|| {
        let gets = keys.iter().map(|k| store.get(k.clone()));
        for r in futures::executor::block_on(futures::future::join_all(gets)) {
            let got = r?.len() as u64;
            if got != len {
                return Err(anyhow!("a GET returned {got} bytes, not {len}"));
            }
        }
        Ok(())
    })?;
    for k in &keys {
        let _ = futures::executor::block_on(store.delete(k.clone()));
    }
    let _ = std::fs::remove_file(&src);
    let total = (len as f64) * a.objects as f64 / 1e6;
    let out = json!({
        "store": store.description(),
        "objects": a.objects,
        "object_mb": a.object_mb,
        "put_mb_per_sec": total / put,
        "get_mb_per_sec": total / get,
    });
    eprintln!("PUT {:.0} MB/s, GET {:.0} MB/s", total / put, total / get);
    println!("{out}");
    Ok(())
}

/// Seconds `f` took, or its error.
fn timed(f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed().as_secs_f64())
}

#[derive(clap::Args)]
pub struct S3ServerArgs {
    /// Objects are files under ROOT/BUCKET/.
    #[arg(long)]
    pub root: PathBuf,
    /// The bucket created at start.
    #[arg(long, default_value = "tiered")]
    pub bucket: String,
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: String,
    #[arg(long, default_value = "bench-key")]
    pub access_key: String,
    #[arg(long, default_value = "bench-secret")]
    pub secret_key: String,
}

/// Serves S3 (path-style, SigV4 with the given key) from files until killed.
pub fn s3_server(a: &S3ServerArgs) -> Result<()> {
    std::fs::create_dir_all(a.root.join(&a.bucket))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&a.listen).await?;
        eprintln!(
            "S3 server on http://{} (bucket {}, files under {})",
            listener.local_addr()?,
            a.bucket,
            a.root.display()
        );
        let service = tributary_s3_server::service(&a.root, &a.access_key, &a.secret_key)?;
        tributary_s3_server::serve(listener, service).await?;
        Ok(())
    })
}
