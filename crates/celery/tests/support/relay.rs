//! A TCP relay on loopback, whose broker-to-client direction can be held: the
//! bytes wait in the sockets' buffers, as they do for a process too starved
//! to read its socket (a scheduler host's CPU taken for seconds). The client
//! end (Overseer's check) sees nothing for that long; the broker sees a
//! consumer that does not take what it was sent.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The relay: a listener on a free loopback port, relaying each connection
/// to its target on a pair of threads; they end with their sockets, the
/// listener when the relay is dropped.
pub struct Relay {
    port: u16,
    held: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// A relay to `target` (`127.0.0.1:5672`).
    pub fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the relay");
        listener
            .set_nonblocking(true)
            .expect("a listener that can be stopped");
        let port = listener.local_addr().unwrap().port();
        let held = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (target, held_for, stop_for) = (target.to_owned(), held.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop_for.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let (Ok(client_out), Ok(server_out)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                pump(client, server_out, None);
                pump(server, client_out, Some(held_for.clone()));
            }
        });
        Self { port, held, stop }
    }

    /// `url` with the relay's address in place of `target`'s.
    pub fn url(&self, url: &str, target: &str) -> String {
        url.replace(target, &format!("127.0.0.1:{}", self.port))
    }

    /// Holds what the broker sends for `time`, then lets it through.
    pub fn hold(&self, time: Duration) {
        self.held.store(true, Ordering::Relaxed);
        std::thread::sleep(time);
        self.held.store(false, Ordering::Relaxed);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.held.store(false, Ordering::Relaxed);
    }
}

/// Copies `from` to `to` on a thread of its own, waiting while `held`; ends
/// (shutting both down) when either end closes.
fn pump(mut from: TcpStream, mut to: TcpStream, held: Option<Arc<AtomicBool>>) {
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            while held.as_ref().is_some_and(|h| h.load(Ordering::Relaxed)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}
