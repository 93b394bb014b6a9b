//! The object store behind tiered storage, behind a narrow seam.
//!
//! `object_store` (S3 and anything S3-compatible, or a directory of local files) runs on tokio;
//! the broker's shards run glommio. So one thread beside the shards runs a tokio runtime and the
//! store client, and a shard hands it an operation ([`RemoteStore::put_file`],
//! [`RemoteStore::get_range`], …) and awaits the answer on a one-shot channel, which any
//! executor can await: a shard never blocks on the store, and the store's I/O never runs on a
//! shard. Keys are plain strings chosen by the caller; this crate knows nothing of Kafka.

mod config;

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::channel::oneshot;
use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, Semaphore};
use tracing::info;

pub use config::{Secret, StoreConfig, StoreKind};

/// Objects up to this size are written with one PUT; larger ones in parts of this size.
pub const PART_BYTES: usize = 8 << 20;

/// Parts of one multipart upload in flight at once.
const PARTS_IN_FLIGHT: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The object is not in the store.
    #[error("object {key} is not in the remote store")]
    NotFound { key: String },
    /// The store refused or failed the operation, or could not be reached.
    #[error("remote store {op} of {key} failed: {detail}")]
    Store {
        op: &'static str,
        key: String,
        detail: String,
    },
    /// A local file to upload could not be read, or was not as long as expected.
    #[error("reading {path} to upload it: {detail}")]
    LocalFile { path: String, detail: String },
    /// The store's thread is gone (the broker is stopping).
    #[error("the remote store's thread has stopped")]
    Stopped,
}

/// What an upload wrote: its length and the CRC32C of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uploaded {
    pub size: u64,
    pub crc32c: u32,
}

enum Op {
    PutFile {
        key: String,
        path: PathBuf,
        len: u64,
        reply: oneshot::Sender<Result<Uploaded, RemoteError>>,
    },
    Put {
        key: String,
        bytes: Bytes,
        reply: oneshot::Sender<Result<Uploaded, RemoteError>>,
    },
    GetRange {
        key: String,
        range: Range<u64>,
        reply: oneshot::Sender<Result<Bytes, RemoteError>>,
    },
    Get {
        key: String,
        reply: oneshot::Sender<Result<Bytes, RemoteError>>,
    },
    Delete {
        key: String,
        reply: oneshot::Sender<Result<(), RemoteError>>,
    },
    List {
        prefix: String,
        reply: oneshot::Sender<Result<Vec<(String, u64)>, RemoteError>>,
    },
}

/// A handle to the store's thread; cheap to clone and usable from any thread.
#[derive(Clone)]
pub struct RemoteStore {
    ops: mpsc::UnboundedSender<Op>,
    description: Arc<str>,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteStore({})", self.description)
    }
}

impl RemoteStore {
    /// Builds the store client from `config` and starts its thread. Fails when the
    /// configuration cannot make a client (a bad URL, a `file://` directory that cannot be
    /// created), with the reason; credentials are never part of the message.
    pub fn start(config: &StoreConfig) -> Result<RemoteStore, String> {
        let store = config.build()?;
        let description: Arc<str> = config.describe().into();
        let (tx, rx) = mpsc::unbounded_channel();
        let concurrency = config.max_inflight.max(1);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("tributary-remote")
            .build()
            .map_err(|e| format!("starting the remote store's runtime: {e}"))?;
        let name = description.clone();
        std::thread::Builder::new()
            .name("tributary-remote".into())
            .spawn(move || runtime.block_on(serve(store, rx, concurrency, name)))
            .map_err(|e| format!("starting the remote store's thread: {e}"))?;
        info!(store = %description, "remote log storage ready");
        Ok(RemoteStore {
            ops: tx,
            description,
        })
    }

    /// Where objects go, for logs and messages (no credentials).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Uploads the first `len` bytes of the file at `path` as `key`.
    pub async fn put_file(
        &self,
        key: String,
        path: PathBuf,
        len: u64,
    ) -> Result<Uploaded, RemoteError> {
        self.ask(|reply| Op::PutFile {
            key,
            path,
            len,
            reply,
        })
        .await
    }

    /// Writes `bytes` as `key`.
    pub async fn put(&self, key: String, bytes: Bytes) -> Result<Uploaded, RemoteError> {
        self.ask(|reply| Op::Put { key, bytes, reply }).await
    }

    /// Bytes `range` of `key` (one ranged GET).
    pub async fn get_range(&self, key: String, range: Range<u64>) -> Result<Bytes, RemoteError> {
        self.ask(|reply| Op::GetRange { key, range, reply }).await
    }

    /// The whole of `key`.
    pub async fn get(&self, key: String) -> Result<Bytes, RemoteError> {
        self.ask(|reply| Op::Get { key, reply }).await
    }

    /// Deletes `key`; one already gone is not an error.
    pub async fn delete(&self, key: String) -> Result<(), RemoteError> {
        self.ask(|reply| Op::Delete { key, reply }).await
    }

    /// Every object under `prefix`, with its size, in no particular order.
    pub async fn list(&self, prefix: String) -> Result<Vec<(String, u64)>, RemoteError> {
        self.ask(|reply| Op::List { prefix, reply }).await
    }

    async fn ask<T>(
        &self,
        op: impl FnOnce(oneshot::Sender<Result<T, RemoteError>>) -> Op,
    ) -> Result<T, RemoteError> {
        let (tx, rx) = oneshot::channel();
        self.ops.send(op(tx)).map_err(|_| RemoteError::Stopped)?;
        rx.await.unwrap_or(Err(RemoteError::Stopped))
    }
}

/// The store thread's loop: each operation runs as its own task, at most `concurrency` at once.
async fn serve(
    store: Arc<dyn ObjectStore>,
    mut ops: mpsc::UnboundedReceiver<Op>,
    concurrency: usize,
    name: Arc<str>,
) {
    let slots = Arc::new(Semaphore::new(concurrency));
    while let Some(op) = ops.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let store = store.clone();
        tokio::spawn(async move {
            run(&*store, op).await;
            drop(slot);
        });
    }
    info!(store = %name, "remote log storage stopped");
}

async fn run(store: &dyn ObjectStore, op: Op) {
    match op {
        Op::PutFile {
            key,
            path,
            len,
            reply,
        } => {
            let _ = reply.send(put_file(store, &key, &path, len).await);
        }
        Op::Put { key, bytes, reply } => {
            let uploaded = Uploaded {
                size: bytes.len() as u64,
                crc32c: crc32c::crc32c(&bytes),
            };
            let out = store
                .put(
                    &StorePath::from(key.as_str()),
                    PutPayload::from_bytes(bytes),
                )
                .await
                .map(|_| uploaded)
                .map_err(|e| store_error("PUT", &key, e));
            let _ = reply.send(out);
        }
        Op::GetRange { key, range, reply } => {
            let out = store
                .get_range(&StorePath::from(key.as_str()), range)
                .await
                .map_err(|e| store_error("ranged GET", &key, e));
            let _ = reply.send(out);
        }
        Op::Get { key, reply } => {
            let path = StorePath::from(key.as_str());
            let out = match store.get(&path).await {
                Ok(got) => got.bytes().await.map_err(|e| store_error("GET", &key, e)),
                Err(e) => Err(store_error("GET", &key, e)),
            };
            let _ = reply.send(out);
        }
        Op::Delete { key, reply } => {
            let out = match store.delete(&StorePath::from(key.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(store_error("DELETE", &key, e)),
            };
            let _ = reply.send(out);
        }
        Op::List { prefix, reply } => {
            let _ = reply.send(list(store, &prefix).await);
        }
    }
}

async fn list(store: &dyn ObjectStore, prefix: &str) -> Result<Vec<(String, u64)>, RemoteError> {
    let path = StorePath::from(prefix);
    let mut objects = store.list(Some(&path));
    let mut out = Vec::new();
    while let Some(meta) = objects.next().await {
        let meta = meta.map_err(|e| store_error("LIST", prefix, e))?;
        out.push((meta.location.to_string(), meta.size));
    }
    Ok(out)
}

/// Streams the file's first `len` bytes to the store: one PUT when it fits a part, else a
/// multipart upload of [`PART_BYTES`] parts. The file must hold at least `len` bytes.
async fn put_file(
    store: &dyn ObjectStore,
    key: &str,
    path: &std::path::Path,
    len: u64,
) -> Result<Uploaded, RemoteError> {
    let local = |e: String| RemoteError::LocalFile {
        path: path.display().to_string(),
        detail: e,
    };
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| local(e.to_string()))?;
    let location = StorePath::from(key);
    let mut crc = 0u32;
    let mut left = len;
    let next_chunk = async |file: &mut tokio::fs::File, left: &mut u64| {
        let n = (*left).min(PART_BYTES as u64) as usize;
        let mut buf = vec![0u8; n];
        file.read_exact(&mut buf)
            .await
            .map_err(|e| local(format!("{e} ({} of {len} bytes left)", *left)))?;
        *left -= n as u64;
        Ok::<Bytes, RemoteError>(Bytes::from(buf))
    };
    if len <= PART_BYTES as u64 {
        let chunk = next_chunk(&mut file, &mut left).await?;
        crc = crc32c::crc32c(&chunk);
        store
            .put(&location, PutPayload::from_bytes(chunk))
            .await
            .map_err(|e| store_error("PUT", key, e))?;
        return Ok(Uploaded {
            size: len,
            crc32c: crc,
        });
    }
    let upload = store
        .put_multipart(&location)
        .await
        .map_err(|e| store_error("multipart PUT", key, e))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    while left > 0 {
        let chunk = match next_chunk(&mut file, &mut left).await {
            Ok(chunk) => chunk,
            Err(e) => {
                let _ = writer.abort().await;
                return Err(e);
            }
        };
        crc = crc32c::crc32c_append(crc, &chunk);
        if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
            return Err(store_error("multipart PUT", key, e));
        }
        writer.put(chunk);
    }
    writer
        .finish()
        .await
        .map_err(|e| store_error("multipart PUT", key, e))?;
    Ok(Uploaded {
        size: len,
        crc32c: crc,
    })
}

fn store_error(op: &'static str, key: &str, e: object_store::Error) -> RemoteError {
    match e {
        object_store::Error::NotFound { .. } => RemoteError::NotFound {
            key: key.to_string(),
        },
        e => RemoteError::Store {
            op,
            key: key.to_string(),
            detail: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;
