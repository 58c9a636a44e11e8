//! `GetTokenizer`: the engine's tokenizer files as a zip archive, sent in chunks of
//! `--tokenizer-chunk-bytes`, the last one carrying the archive's SHA-256 (wrong under
//! `--corrupt-tokenizer-sha`). The archive is built per call from `--tokenizer-path` (a
//! directory's plain files, or a single `tokenizer.json`), so a test can change the files
//! between calls.

use std::io::{Cursor, Write};
use std::path::Path;

use ring::digest::{digest, SHA256};
use tollgate::engine::grpc::common::GetTokenizerChunk;
use tonic::codegen::tokio_stream;
use tonic::Status;
use zip::write::SimpleFileOptions;

/// The stream every service's `GetTokenizer` answers with.
pub type Chunks = tokio_stream::Iter<std::vec::IntoIter<Result<GetTokenizerChunk, Status>>>;

/// Default chunk size: what a servicer sends per message, well under gRPC's 4 MiB limit.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

/// The archive of the files at `path`, chunked, or why there is none.
pub fn chunks(path: Option<&str>, chunk_bytes: usize, corrupt: bool) -> Result<Chunks, Status> {
    let path = path.ok_or_else(|| {
        Status::not_found("grpc-engine has no tokenizer to send (no --tokenizer-path)")
    })?;
    let archive = archive(Path::new(path)).map_err(|e| Status::internal(e.to_string()))?;
    let mut sha = hex(digest(&SHA256, &archive).as_ref());
    if corrupt {
        // Flip the first digit: still well-formed, no longer the archive's digest.
        let first = if sha.starts_with('0') { "1" } else { "0" };
        sha.replace_range(0..1, first);
    }
    let pieces: Vec<&[u8]> = archive.chunks(chunk_bytes.max(1)).collect();
    let last = pieces.len().saturating_sub(1);
    let chunks: Vec<Result<GetTokenizerChunk, Status>> = pieces
        .iter()
        .enumerate()
        .map(|(i, data)| {
            Ok(GetTokenizerChunk {
                data: data.to_vec(),
                sha256: if i == last {
                    sha.clone()
                } else {
                    String::new()
                },
            })
        })
        .collect();
    crate::say::line(format_args!(
        "get_tokenizer bytes={} chunks={}",
        archive.len(),
        chunks.len()
    ));
    Ok(tokio_stream::iter(chunks))
}

/// A zip of the plain files of directory `path`, or of the single file `path` named
/// `tokenizer.json`.
fn archive(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut files = Vec::new();
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with('.') {
                    files.push((name, std::fs::read(entry.path())?));
                }
            }
        }
        files.sort();
    } else {
        files.push(("tokenizer.json".to_owned(), std::fs::read(path)?));
    }
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in files {
        zip.start_file(name, options)?;
        zip.write_all(&data)?;
    }
    Ok(zip.finish()?.into_inner())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codegen::tokio_stream::StreamExt;

    #[tokio::test]
    async fn a_directory_goes_out_in_chunks_with_its_digest_last() {
        let dir = std::env::temp_dir().join(format!("grpc-engine-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tokenizer.json"), vec![b'x'; 5000]).unwrap();
        std::fs::write(dir.join(".hidden"), b"no").unwrap();
        let got: Vec<GetTokenizerChunk> = chunks(dir.to_str(), 100, false)
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        assert!(got.len() > 1);
        assert!(got[..got.len() - 1].iter().all(|c| c.sha256.is_empty()));
        let bytes: Vec<u8> = got.iter().flat_map(|c| c.data.clone()).collect();
        assert_eq!(
            got.last().unwrap().sha256,
            hex(digest(&SHA256, &bytes).as_ref())
        );
        let files = tollgate::engine::grpc::bundle::unpack(&bytes).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].name, "tokenizer.json");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            chunks(None, 100, false).unwrap_err().code(),
            tonic::Code::NotFound
        );
    }
}
