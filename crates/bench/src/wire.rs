//! Bytes on the wire between Overseer and Postgres, per kind of work.
//!
//! `pg_stat_statements` is not installed on the shared server, so the bytes a
//! flush sends are counted on the way: a loopback proxy in the parent process
//! (so its CPU is not charged to the scenario) forwards every byte unchanged and
//! reads the frontend messages' headers (Postgres protocol v3, no TLS:
//! `sslmode=disable`). Each message is charged to the SQL it belongs to:
//! `Query` and `Parse` carry the SQL text, `Bind` names a parsed statement, and
//! the messages after them (`Execute`, `Sync`, ...) belong to the same one.
//! `BEGIN`, `UPDATE` and `COMMIT` are a flush's (only flushes write in a
//! transaction once Overseer has started); `SELECT`s are the report's refresh.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a message is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Flush,
    Refresh,
    Other,
}

fn classify(sql: &[u8]) -> Work {
    let text = String::from_utf8_lossy(&sql[..sql.len().min(16)]).to_ascii_uppercase();
    let text = text.trim_start();
    if ["UPDATE", "BEGIN", "COMMIT", "START TRANSACTION"]
        .iter()
        .any(|k| text.starts_with(k))
    {
        Work::Flush
    } else if text.starts_with("SELECT") {
        Work::Refresh
    } else {
        Work::Other
    }
}

/// The counters, shared by every connection through one proxy.
#[derive(Debug, Default)]
pub struct Counts {
    /// Bytes Overseer sent for flushes (heartbeats and verdicts, with BEGIN/COMMIT).
    pub flush_bytes: AtomicU64,
    /// Bytes Overseer sent for the report's reads.
    pub refresh_bytes: AtomicU64,
    /// Everything else it sent (start-up, ending the rows).
    pub other_bytes: AtomicU64,
    /// Bytes the server sent back, all kinds together.
    pub server_bytes: AtomicU64,
    /// `BEGIN`s seen: one per flush.
    pub transactions: AtomicU64,
    /// `UPDATE` statements seen.
    pub updates: AtomicU64,
}

/// A copy of [`Counts`] at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    pub flush_bytes: u64,
    pub server_bytes: u64,
    pub transactions: u64,
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            flush_bytes: get(&self.flush_bytes),
            server_bytes: get(&self.server_bytes),
            transactions: get(&self.transactions),
        }
    }

    fn add(&self, work: Work, bytes: u64) {
        let counter = match work {
            Work::Flush => &self.flush_bytes,
            Work::Refresh => &self.refresh_bytes,
            Work::Other => &self.other_bytes,
        };
        counter.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// A counting proxy on a loopback port, forwarding to one Postgres server.
pub struct Proxy {
    pub port: u16,
    pub counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(upstream: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s, upstream) = (counts.clone(), stop.clone(), upstream.to_owned());
        std::thread::Builder::new()
            .name("pg-proxy".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect(&upstream) else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    relay(client, server, c.clone());
                }
            })?;
        Ok(Self { port, counts, stop })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Two threads per connection: one copies the server's bytes back, one parses
/// and forwards the client's.
fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>) {
    let (Ok(mut client_r), Ok(mut server_w)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let (mut server_r, mut client_w) = (server, client);
    let back = counts.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = server_r.read(&mut buf) {
            if n == 0 || client_w.write_all(&buf[..n]).is_err() {
                break;
            }
            back.server_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        let _ = client_w.shutdown(Shutdown::Both);
    });
    std::thread::spawn(move || {
        let mut parser = Parser::default();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = client_r.read(&mut buf) {
            if n == 0 || server_w.write_all(&buf[..n]).is_err() {
                break;
            }
            parser.feed(&buf[..n], &counts);
        }
        let _ = server_w.shutdown(Shutdown::Both);
    });
}

/// Reads frontend messages as they stream by.
#[derive(Default)]
struct Parser {
    pending: Vec<u8>,
    /// Past the start-up message: every message now has a type byte.
    typed: bool,
    /// What the messages without SQL of their own are charged to.
    current: Option<Work>,
    /// Prepared statements by name, and what they are.
    statements: HashMap<Vec<u8>, Work>,
}

impl Parser {
    fn feed(&mut self, bytes: &[u8], counts: &Counts) {
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(bytes);
        let mut at = 0;
        loop {
            let rest = &pending[at..];
            let (header, len) = if self.typed {
                if rest.len() < 5 {
                    break;
                }
                (
                    1,
                    u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize,
                )
            } else {
                if rest.len() < 4 {
                    break;
                }
                (
                    0,
                    u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize,
                )
            };
            let total = header + len;
            if rest.len() < total {
                break;
            }
            let message = &rest[..total];
            if self.typed {
                let work = self.message(message, counts);
                counts.add(work, total as u64);
            } else {
                // SSLRequest and GSSENCRequest (codes 80877103/4) keep the next untyped.
                let code = u32::from_be_bytes([message[4], message[5], message[6], message[7]]);
                if code != 80_877_103 && code != 80_877_104 {
                    self.typed = true;
                }
                counts.add(Work::Other, total as u64);
            }
            at += total;
        }
        pending.drain(..at);
        self.pending = pending;
    }

    /// What one typed message is charged to.
    fn message(&mut self, message: &[u8], counts: &Counts) -> Work {
        let body = &message[5..];
        let cstr = |from: usize| -> &[u8] {
            let s = &body[from.min(body.len())..];
            &s[..s.iter().position(|b| *b == 0).unwrap_or(s.len())]
        };
        let work = match message[0] {
            b'Q' => {
                let sql = cstr(0);
                self.count(sql, counts);
                classify(sql)
            }
            b'P' => {
                let name = cstr(0).to_vec();
                let sql = cstr(name.len() + 1);
                let work = classify(sql);
                self.statements.insert(name, work);
                work
            }
            b'B' => {
                let portal = cstr(0).len();
                let name = cstr(portal + 1);
                let work = self.statements.get(name).copied().unwrap_or(Work::Other);
                if work == Work::Flush {
                    // A prepared UPDATE (the heartbeat) runs once per Bind.
                    counts.updates.fetch_add(1, Ordering::Relaxed);
                }
                work
            }
            _ => return self.current.unwrap_or(Work::Other),
        };
        self.current = Some(work);
        work
    }

    fn count(&self, sql: &[u8], counts: &Counts) {
        let head = String::from_utf8_lossy(&sql[..sql.len().min(8)]).to_ascii_uppercase();
        if head.starts_with("BEGIN") || head.starts_with("START") {
            counts.transactions.fetch_add(1, Ordering::Relaxed);
        } else if head.starts_with("UPDATE") {
            counts.updates.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn messages_are_charged_to_their_sql() {
        let counts = Counts::default();
        let mut p = Parser::default();
        let mut startup = 8u32.to_be_bytes().to_vec();
        startup.extend_from_slice(&196_608u32.to_be_bytes());
        let mut stream = startup;
        stream.extend(typed(b'Q', b"BEGIN\0"));
        stream.extend(typed(b'P', b"s1\0UPDATE job SET x = 1\0\0\0"));
        stream.extend(typed(b'B', b"\0s1\0\0\0\0\0\0\0"));
        stream.extend(typed(b'E', b"\0\0\0\0\0"));
        stream.extend(typed(b'Q', b"SELECT 1\0"));
        // Fed in awkward pieces, as TCP delivers them.
        for chunk in stream.chunks(3) {
            p.feed(chunk, &counts);
        }
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(get(&counts.transactions), 1);
        assert_eq!(get(&counts.updates), 1);
        assert_eq!(get(&counts.refresh_bytes), 14);
        assert_eq!(
            get(&counts.flush_bytes) + get(&counts.refresh_bytes) + get(&counts.other_bytes),
            stream.len() as u64
        );
    }
}
