//! The tokenizer archive an engine streams (`GetTokenizer`): its chunks assembled within a
//! size bound and checked against the SHA-256 the engine sends, then unpacked as a flat set
//! of plain files. The archive comes from the network, so nothing in it is trusted: names
//! that could leave the scratch directory, links, directories, too many files and sizes
//! that lie are all refused, and what is unpacked is counted as it is read.

use std::fmt;
use std::io::{self, Read, Write};
use std::path::Path;

use ring::digest::{Context, SHA256};

/// The archive, compressed, at most. A tokenizer with its configuration and template is a
/// few megabytes; the largest vocabularies stay far below this.
pub const MAX_ARCHIVE_BYTES: usize = 256 << 20;

/// Files in the archive, at most (tokenizer.json, tokenizer_config.json, a template, a
/// vocabulary and merges, special tokens: a handful).
pub const MAX_FILES: usize = 64;

/// Everything unpacked, at most, counted as read rather than as the archive claims.
pub const MAX_UNPACKED_BYTES: u64 = 512 << 20;

/// Why an archive was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum BundleError {
    /// More bytes than the bound allows.
    TooLarge { limit: usize },
    /// A chunk after the one that carried the digest.
    DataAfterDigest,
    /// The stream ended without a digest.
    NoDigest,
    /// The digest is not 64 hex digits.
    BadDigest,
    /// The bytes do not hash to the digest sent with them.
    DigestMismatch,
    /// Not a zip archive the reader understands (or a damaged one).
    NotAnArchive(String),
    /// More files than [`MAX_FILES`].
    TooManyFiles(usize),
    /// An entry that is not a plain file with a flat, visible name.
    UnsafeEntry(String),
    /// More unpacked bytes than [`MAX_UNPACKED_BYTES`].
    UnpackedTooLarge,
    /// No files at all.
    Empty,
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BundleError::TooLarge { limit } => write!(
                f,
                "the engine's tokenizer archive is larger than {limit} bytes"
            ),
            BundleError::DataAfterDigest => f.write_str(
                "the engine sent tokenizer archive data after the chunk that carried its SHA-256",
            ),
            BundleError::NoDigest => {
                f.write_str("the engine's tokenizer archive came without its SHA-256")
            }
            BundleError::BadDigest => {
                f.write_str("the engine's tokenizer archive SHA-256 is not 64 hexadecimal digits")
            }
            BundleError::DigestMismatch => {
                f.write_str("the engine's tokenizer archive does not match its SHA-256")
            }
            BundleError::NotAnArchive(why) => {
                write!(
                    f,
                    "the engine's tokenizer archive is not a zip archive: {why}"
                )
            }
            BundleError::TooManyFiles(n) => write!(
                f,
                "the engine's tokenizer archive holds {n} entries, at most {MAX_FILES} are taken"
            ),
            BundleError::UnsafeEntry(name) => write!(
                f,
                "the engine's tokenizer archive holds {name:?}, which is not a plain file with \
                 a flat name"
            ),
            BundleError::UnpackedTooLarge => write!(
                f,
                "the engine's tokenizer archive unpacks to more than {MAX_UNPACKED_BYTES} bytes"
            ),
            BundleError::Empty => f.write_str("the engine's tokenizer archive holds no files"),
        }
    }
}

impl std::error::Error for BundleError {}

/// Gathers an archive's chunks, hashing as they come.
pub struct Assembler {
    bytes: Vec<u8>,
    limit: usize,
    hash: Context,
    /// The digest the last chunk carried (lowercase hex).
    declared: Option<String>,
}

/// An archive whose bytes hash to the digest the engine sent.
#[derive(Debug)]
pub struct Verified {
    pub bytes: Vec<u8>,
    /// Lowercase hex.
    pub sha256: String,
}

impl Assembler {
    /// An assembler that refuses more than `limit` bytes.
    pub fn new(limit: usize) -> Assembler {
        Assembler {
            bytes: Vec::new(),
            limit,
            hash: Context::new(&SHA256),
            declared: None,
        }
    }

    /// Takes the next chunk; `sha256` is empty but on the last one.
    pub fn push(&mut self, data: &[u8], sha256: &str) -> Result<(), BundleError> {
        if self.declared.is_some() && !(data.is_empty() && sha256.is_empty()) {
            return Err(BundleError::DataAfterDigest);
        }
        if self.bytes.len().saturating_add(data.len()) > self.limit {
            return Err(BundleError::TooLarge { limit: self.limit });
        }
        self.bytes.extend_from_slice(data);
        self.hash.update(data);
        if !sha256.is_empty() {
            let digest = sha256.trim();
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(BundleError::BadDigest);
            }
            self.declared = Some(digest.to_ascii_lowercase());
        }
        Ok(())
    }

    /// The whole archive, once its bytes match the digest sent.
    pub fn finish(self) -> Result<Verified, BundleError> {
        let declared = self.declared.ok_or(BundleError::NoDigest)?;
        let actual = hex(self.hash.finish().as_ref());
        if actual != declared {
            return Err(BundleError::DigestMismatch);
        }
        Ok(Verified {
            bytes: self.bytes,
            sha256: actual,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// One unpacked file.
#[derive(Debug, PartialEq, Eq)]
pub struct File {
    /// A flat name: no separators, not hidden, not `.` or `..`.
    pub name: String,
    pub contents: Vec<u8>,
}

/// The archive's files, each checked to be a plain file with a flat name, within
/// [`MAX_FILES`] and [`MAX_UNPACKED_BYTES`].
pub fn unpack(archive: &[u8]) -> Result<Vec<File>, BundleError> {
    let mut zip = zip::ZipArchive::new(io::Cursor::new(archive))
        .map_err(|e| BundleError::NotAnArchive(e.to_string()))?;
    if zip.len() > MAX_FILES {
        return Err(BundleError::TooManyFiles(zip.len()));
    }
    let mut files: Vec<File> = Vec::with_capacity(zip.len());
    let mut left = MAX_UNPACKED_BYTES;
    for i in 0..zip.len() {
        let entry = zip
            .by_index(i)
            .map_err(|e| BundleError::NotAnArchive(e.to_string()))?;
        let name = entry.name().to_owned();
        if !entry.is_file() || entry.is_symlink() || !flat(&name) {
            return Err(BundleError::UnsafeEntry(name));
        }
        // Read one byte past what is left, so a size the header understates is caught.
        let mut contents = Vec::new();
        entry
            .take(left.saturating_add(1))
            .read_to_end(&mut contents)
            .map_err(|e| BundleError::NotAnArchive(e.to_string()))?;
        let read = contents.len() as u64;
        if read > left {
            return Err(BundleError::UnpackedTooLarge);
        }
        left -= read;
        files.push(File { name, contents });
    }
    if files.is_empty() {
        return Err(BundleError::Empty);
    }
    Ok(files)
}

/// A name that stays inside the directory it is written to and is visible there.
fn flat(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0', ':'])
        && !name.chars().any(char::is_control)
}

/// Writes `files` into `dir`, which must not exist yet: it is created private to this
/// user (0700), and each file is created new, so nothing already there is followed or
/// overwritten.
pub fn write_into(files: &[File], dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)?;
    for file in files {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(&file.name))?;
        out.write_all(&file.contents)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    fn archive(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        let options =
            SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in entries {
            zip.start_file(*name, options).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    fn digest(bytes: &[u8]) -> String {
        hex(ring::digest::digest(&SHA256, bytes).as_ref())
    }

    #[test]
    fn chunks_assemble_and_verify() {
        let bytes = archive(&[("tokenizer.json", b"{}"), ("chat_template.jinja", b"x")]);
        let sha = digest(&bytes);
        let mut a = Assembler::new(MAX_ARCHIVE_BYTES);
        for piece in bytes.chunks(7) {
            a.push(piece, "").unwrap();
        }
        a.push(&[], &sha.to_ascii_uppercase()).unwrap();
        let verified = a.finish().unwrap();
        assert_eq!(verified.sha256, sha);
        let files = unpack(&verified.bytes).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["tokenizer.json", "chat_template.jinja"]);
        assert_eq!(files[0].contents, b"{}");
    }

    #[test]
    fn digest_rules() {
        let bytes = archive(&[("tokenizer.json", b"{}")]);
        let mut a = Assembler::new(MAX_ARCHIVE_BYTES);
        a.push(&bytes, &digest(b"other")).unwrap();
        assert_eq!(a.finish().unwrap_err(), BundleError::DigestMismatch);

        let mut a = Assembler::new(MAX_ARCHIVE_BYTES);
        a.push(&bytes, "").unwrap();
        assert_eq!(a.finish().unwrap_err(), BundleError::NoDigest);

        let mut a = Assembler::new(MAX_ARCHIVE_BYTES);
        assert_eq!(a.push(&bytes, "abc").unwrap_err(), BundleError::BadDigest);

        let mut a = Assembler::new(MAX_ARCHIVE_BYTES);
        a.push(&bytes, &digest(&bytes)).unwrap();
        assert_eq!(a.push(b"x", "").unwrap_err(), BundleError::DataAfterDigest);

        let mut a = Assembler::new(4);
        assert_eq!(
            a.push(b"12345", "").unwrap_err(),
            BundleError::TooLarge { limit: 4 }
        );
    }

    #[test]
    fn entries_must_be_flat_plain_files() {
        for name in ["../evil", "dir/tokenizer.json", ".hidden", "a\\b", "c:x"] {
            let bytes = archive(&[(name, b"x")]);
            assert!(
                matches!(unpack(&bytes), Err(BundleError::UnsafeEntry(_))),
                "{name}"
            );
        }
        let mut zip = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        zip.add_directory("sub", SimpleFileOptions::default())
            .unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        assert!(matches!(unpack(&bytes), Err(BundleError::UnsafeEntry(_))));

        let mut zip = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        zip.add_symlink(
            "tokenizer.json",
            "/etc/passwd",
            SimpleFileOptions::default(),
        )
        .unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        assert!(matches!(unpack(&bytes), Err(BundleError::UnsafeEntry(_))));
    }

    #[test]
    fn counts_and_garbage_are_refused() {
        let many: Vec<(String, &[u8])> = (0..=MAX_FILES)
            .map(|i| (format!("f{i}"), &b"x"[..]))
            .collect();
        let refs: Vec<(&str, &[u8])> = many.iter().map(|(n, d)| (n.as_str(), *d)).collect();
        assert!(matches!(
            unpack(&archive(&refs)),
            Err(BundleError::TooManyFiles(_))
        ));
        assert!(matches!(
            unpack(b"not a zip"),
            Err(BundleError::NotAnArchive(_))
        ));
        assert_eq!(unpack(&archive(&[])).unwrap_err(), BundleError::Empty);
    }

    #[test]
    fn written_files_land_in_a_new_private_directory() {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-bundle-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let files = vec![File {
            name: "tokenizer.json".into(),
            contents: b"{}".to_vec(),
        }];
        write_into(&files, &dir).unwrap();
        assert_eq!(std::fs::read(dir.join("tokenizer.json")).unwrap(), b"{}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        // The directory must be new.
        assert!(write_into(&files, &dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
