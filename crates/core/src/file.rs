//! The one reader of every file Overseer opens: Airflow's `airflow.cfg`,
//! `overseer.toml`, the server's certificate and key, a check's CA bundle, a
//! broker's TLS files.
//!
//! A path a user names may be anything: a FIFO (whose open waits for a writer
//! forever), `/dev/zero` (which never ends), a file of gigabytes, a file on a
//! mount that stopped answering. [`read`] takes regular files only, up to a
//! size given by the caller, within [`DEADLINE`], and says what was wrong in
//! words a caller puts after the file's name (`is a FIFO, not a regular file`).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// How long reading a file may take: a local file takes microseconds; a
/// mount that stopped answering would hold start-up for ever.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// How large a CA bundle (or any PEM file a check reads) may be: the
/// system's own, every public CA, is about 220 KiB.
pub const MAX_CA_BUNDLE: u64 = 16 * 1024 * 1024;

/// Why a file was not read, in words that follow `cannot read {file}: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError(String);

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FileError {}

/// The whole of the regular file at `path`, at most `limit` bytes, within
/// [`DEADLINE`]. A FIFO, a device, a socket or a folder is refused without
/// being read (a FIFO's open does not wait for a writer); so is a file
/// larger than `limit`, or one that grows past it while it is read.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    read_within(path, limit, DEADLINE)
}

/// [`read`], within `deadline`.
pub fn read_within(path: &Path, limit: u64, deadline: Duration) -> Result<Vec<u8>, FileError> {
    let owned: PathBuf = path.to_owned();
    let (tx, rx) = mpsc::sync_channel(1);
    // On a thread of its own: a read the kernel never finishes (a hung
    // network mount) is left behind, not waited for.
    let spawned = std::thread::Builder::new()
        .name("overseer-read".to_owned())
        .spawn(move || {
            let _ = tx.send(read_now(&owned, limit));
        });
    if let Err(e) = spawned {
        return Err(FileError(format!("no thread to read it on: {e}")));
    }
    match rx.recv_timeout(deadline) {
        Ok(result) => result,
        Err(_) => Err(FileError(format!(
            "was not read within {}",
            crate::duration::short(deadline)
        ))),
    }
}

fn read_now(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    // Non-blocking: opening a FIFO for reading does not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| FileError(io_words(&e)))?;
    let meta = file.metadata().map_err(|e| FileError(io_words(&e)))?;
    let kind = meta.file_type();
    let not_regular = if kind.is_dir() {
        Some("a folder")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    };
    if let Some(what) = not_regular {
        return Err(FileError(format!("is {what}, not a regular file")));
    }
    if meta.len() > limit {
        return Err(too_large(meta.len(), limit));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| FileError(io_words(&e)))?;
    if bytes.len() as u64 > limit {
        return Err(FileError(format!(
            "grew past {} while it was read",
            bytes_short(limit)
        )));
    }
    Ok(bytes)
}

fn too_large(len: u64, limit: u64) -> FileError {
    FileError(format!(
        "is {}, more than the {} such a file may be",
        bytes_short(len),
        bytes_short(limit)
    ))
}

/// An I/O error as a user reads it: `no such file`, `permission denied`.
fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    }
}

/// A size as a limit reads: `4 MiB`, `64 KiB`, `512 bytes`.
pub fn bytes_short(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;
    match n {
        n if n >= GIB => format!("{:.1} GiB", n as f64 / GIB as f64),
        n if n >= MIB && n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n >= MIB => format!("{:.1} MiB", n as f64 / MIB as f64),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n if n >= KIB => format!("{:.1} KiB", n as f64 / KIB as f64),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(path: &Path, limit: u64) -> String {
        read(path, limit).unwrap_err().to_string()
    }

    #[test]
    fn a_regular_file_within_its_limit_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("airflow.cfg");
        std::fs::write(&path, b"[core]\nexecutor = CeleryExecutor\n").unwrap();
        assert_eq!(
            read(&path, 1024).unwrap(),
            b"[core]\nexecutor = CeleryExecutor\n"
        );
        assert_eq!(read(&path, 33).unwrap().len(), 33, "exactly the limit");
        assert_eq!(
            err(&path, 32),
            "is 33 bytes, more than the 32 bytes such a file may be"
        );
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_at_once_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // No writer ever comes: the open must not wait for one.
        assert_eq!(err(&fifo, 1024), "is a FIFO, not a regular file");
        assert_eq!(
            err(Path::new("/dev/zero"), 1024),
            "is a character device, not a regular file"
        );
        assert_eq!(err(dir.path(), 1024), "is a folder, not a regular file");
        assert_eq!(err(&dir.path().join("nothing"), 1024), "no such file");
    }

    #[test]
    fn sizes_read_as_limits_are_written() {
        assert_eq!(bytes_short(512), "512 bytes");
        assert_eq!(bytes_short(64 * 1024), "64 KiB");
        assert_eq!(bytes_short(4 * 1024 * 1024), "4 MiB");
        assert_eq!(bytes_short(152 * 1024 * 1024 + 1), "152.0 MiB");
        assert_eq!(bytes_short(4 << 30), "4.0 GiB");
    }
}
