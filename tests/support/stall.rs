//! A loopback TCP relay to a server that the test can stall: while stalled it
//! carries nothing either way and closes nothing, as a partitioned network or
//! a frozen server would; let go, it carries what waited. Only what connects
//! to the relay is stalled: the test's other clients reach the server directly.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a stalled pump looks whether it may carry again.
const LOOK_EVERY: Duration = Duration::from_millis(10);

pub struct StallRelay {
    /// The loopback port to connect to instead of the server's.
    pub port: u16,
    stalled: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl StallRelay {
    /// Relays `127.0.0.1:{free port}` to `server`.
    pub fn start(server: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (stall, finished) = (stalled.clone(), done.clone());
        let acceptor = std::thread::spawn(move || {
            for client in listener.incoming() {
                if finished.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(upstream) = TcpStream::connect(server) else {
                    continue;
                };
                // Small frames go at once, as the client's own socket sends
                // them (Nagle's delay would be the relay's, not the network's).
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                for (from, to) in [
                    (client.try_clone(), upstream.try_clone()),
                    (upstream.try_clone(), client.try_clone()),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let (stall, finished) = (stall.clone(), finished.clone());
                    std::thread::spawn(move || pump(from, to, &stall, &finished));
                }
            }
        });
        Self {
            port,
            stalled,
            done,
            acceptor: Some(acceptor),
        }
    }

    /// Stalls every relayed connection for `span`, then lets them go on.
    pub fn stall_for(&self, span: Duration) {
        self.stalled.store(true, Ordering::SeqCst);
        let stalled = self.stalled.clone();
        std::thread::spawn(move || {
            std::thread::sleep(span);
            stalled.store(false, Ordering::SeqCst);
        });
    }
}

/// Carries `from` to `to` until either ends or the relay is dropped; while
/// stalled, reads nothing (what is sent waits in the sockets' buffers).
fn pump(mut from: TcpStream, mut to: TcpStream, stalled: &AtomicBool, done: &AtomicBool) {
    let _ = from.set_read_timeout(Some(LOOK_EVERY));
    let mut buffer = [0_u8; 16 * 1024];
    while !done.load(Ordering::SeqCst) {
        if stalled.load(Ordering::SeqCst) {
            std::thread::sleep(LOOK_EVERY);
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

impl Drop for StallRelay {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees it is done.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}
