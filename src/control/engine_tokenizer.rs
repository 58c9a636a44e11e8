//! The tokenizer a gRPC engine streams (`GetTokenizer`), for an engine whose tokenizer
//! files this host cannot read: the archive is received within a size and time bound,
//! checked against the SHA-256 the engine sends with it, unpacked into a private scratch
//! directory, loaded, and the directory removed again (a loaded kit holds everything it
//! needs in memory).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::chat::language::{Language, Sources};
use crate::engine::grpc::bundle::{self, Assembler};
use crate::engine::grpc::Engine;

/// The whole transfer, however many chunks: a tokenizer is a few megabytes, so this only
/// stops an engine that trickles.
const FETCH_TIMEOUT: Duration = Duration::from_secs(120);

/// A verified archive: its bytes and the hex SHA-256 that names its contents.
pub struct Archive {
    pub bytes: Vec<u8>,
    pub sha256: String,
}

/// What asking the engine gave.
pub enum Fetched {
    Archive(Archive),
    /// The engine's service does not stream its tokenizer (UNIMPLEMENTED).
    NotOffered,
}

/// Receives the engine's tokenizer archive: `call_timeout` bounds the call's answer and
/// each chunk, [`FETCH_TIMEOUT`] the whole.
pub async fn fetch(engine: &Engine, call_timeout: Duration) -> Result<Fetched, String> {
    let deadline = Instant::now() + FETCH_TIMEOUT;
    let mut chunks = match engine.tokenizer(call_timeout).await {
        Ok(chunks) => chunks,
        Err(err) if err.is_unimplemented() => return Ok(Fetched::NotOffered),
        Err(err) => return Err(format!("GetTokenizer: {err}")),
    };
    let mut assembler = Assembler::new(bundle::MAX_ARCHIVE_BYTES);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = left.min(call_timeout);
        let chunk = match tokio::time::timeout(wait, chunks.message()).await {
            Err(_) => {
                return Err(format!(
                    "GetTokenizer: the engine stopped sending its tokenizer archive \
                     (nothing for {} ms)",
                    wait.as_millis()
                ))
            }
            Ok(Err(status)) => return Err(format!("GetTokenizer: {status}")),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        assembler
            .push(&chunk.data, &chunk.sha256)
            .map_err(|err| format!("GetTokenizer: {err}"))?;
    }
    let archive = assembler
        .finish()
        .map_err(|err| format!("GetTokenizer: {err}"))?;
    Ok(Fetched::Archive(Archive {
        bytes: archive.bytes,
        sha256: archive.sha256,
    }))
}

/// The key a streamed tokenizer's kit is shared under: its contents' digest, so every
/// engine that sends the same files shares one kit.
pub fn sources_of(archive: &Archive, chat_template: Option<PathBuf>) -> Sources {
    Sources {
        tokenizer: PathBuf::from(format!("grpc-tokenizer:sha256:{}", archive.sha256)),
        chat_template,
    }
}

/// Unpacks `archive` into a fresh private directory under the system's temporary
/// directory, loads the kit from it with `chat_template`, and removes the directory
/// whatever happened. Blocking: run it on the blocking pool.
pub fn load(archive: &Archive, chat_template: Option<PathBuf>) -> Result<Language, String> {
    let files = bundle::unpack(&archive.bytes).map_err(|err| err.to_string())?;
    let dir = std::env::temp_dir().join(format!(
        "tollgate-tokenizer-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let loaded = bundle::write_into(&files, &dir)
        .map_err(|err| err.to_string())
        .and_then(|()| {
            Language::load(&Sources {
                tokenizer: dir.clone(),
                chat_template,
            })
            .map_err(|err| format!("tokenizer: {err}"))
        });
    remove(&dir);
    loaded
}

fn remove(dir: &Path) {
    if let Err(err) = std::fs::remove_dir_all(dir) {
        if err.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %err, "could not remove the unpacked tokenizer");
        }
    }
}
