//! JSON bodies for the two errors actix-http answers before any handler runs:
//! a request head it cannot parse (`400`, a request line longer than a URI may
//! be, say) and one larger than its 128 KiB buffer (`431`). actix-http's
//! HTTP/1 dispatcher writes these itself, with no body and no hook to give
//! them one, and then closes the connection.
//!
//! # The one seam
//! Neither actix-web's configuration nor its error handlers see these: the
//! dispatcher answers them before any service is called (actix-http 3's
//! `h1::Dispatcher`, on a parse error or a full read buffer). So the API's
//! server wraps each connection's socket in [`JsonEarlyErrors`], which reads
//! what is written as HTTP/1 response heads and rewrites those two answers:
//! the same status line and headers, plus the JSON body every other error has
//! (`{"detail": "..."}`, [`crate::errors`]). It knows them by what only
//! actix-http's own answers are, read as a head (any header order or case,
//! any reason phrase): a `400` or `431` with `content-length: 0` and no
//! `content-type` (every error of this API's handlers has a JSON body).
//! Everything else passes through untouched.
//!
//! # Closing after a refused request
//! The wrapper also ends a connection right after an answer that must be
//! its last. actix-http's dispatcher answers every request it has already
//! read, in order, before it honours a `connection: close`: a request
//! smuggled behind one carrying both `Content-Length` and
//! `Transfer-Encoding` would be served on the same connection (RFC 9112
//! 6.3 says close it). So each connection carries a [`Refusal`] flag, given
//! to its requests through the connection's extensions: the middleware that
//! refuses such a request raises it (and refuses every later request of the
//! connection, so none is run). From then on the wrapper reads nothing more
//! (end of stream), writes up to the end of the refusal's body, and drops
//! whatever is written after it.
//!
//! Should a later actix-http answer them otherwise (with a body of its own,
//! say), nothing breaks: the answer goes out as actix-http wrote it. The
//! end-to-end tests in `tests/abuse.rs` send both errors to the real server
//! and assert the JSON bodies, so such a change is seen the day it lands.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use actix_web::rt::net::TcpStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The JSON body of a `400` actix-http answered itself.
const BAD_REQUEST_BODY: &str =
    r#"{"detail":"Bad Request: the request line or headers could not be parsed"}"#;
/// The JSON body of a `431` actix-http answered itself.
const TOO_LARGE_BODY: &str = r#"{"detail":"Request Header Fields Too Large: the request head has more than 96 header fields or exceeds 128 KiB"}"#;

/// The longest head an early error has: the status line, `content-length`,
/// `connection` and `date` are well under this many bytes.
const LONGEST_HEAD: usize = 512;

/// The body of the answer that ends a connection once [`Refusal`] is raised:
/// [`crate::errors::both_lengths`]'s, byte for byte (a test holds them equal).
pub(crate) const REFUSAL_BODY: &[u8] =
    br#"{"detail":"a request may not carry both Content-Length and Transfer-Encoding"}"#;

/// One connection's flag: raised when a request of it was refused as one
/// that may smuggle another, after which the connection answers nothing else
/// (see the module's doc). Shared by the connection's wrapper and, through
/// the connection's extensions, its requests.
#[derive(Clone, Default)]
pub struct Refusal(Arc<AtomicBool>);

impl Refusal {
    /// From now on the connection ends after the refusal's answer.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A connection whose early errors get JSON bodies (see the module's doc).
pub struct JsonEarlyErrors<T = TcpStream> {
    io: T,
    /// A rewritten answer not yet written to `io`; written before anything else.
    pending: Vec<u8>,
    /// How much of `pending` is written.
    written: usize,
    refusal: Refusal,
    /// How much of [`REFUSAL_BODY`] the last bytes written end with, once
    /// the refusal is raised.
    matched: usize,
    /// The refusal's answer is written: nothing more is, and nothing is read.
    ended: bool,
}

impl<T> JsonEarlyErrors<T> {
    pub fn new(io: T) -> Self {
        Self {
            io,
            pending: Vec::new(),
            written: 0,
            refusal: Refusal::default(),
            matched: 0,
            ended: false,
        }
    }

    /// The socket underneath.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// This connection's flag, for its requests' extensions.
    pub fn refusal(&self) -> Refusal {
        self.refusal.clone()
    }
}

/// Where in `buf` the refusal's body ends, `matched` bytes of it having ended
/// what came before; and how much of it `buf` ends with otherwise. (Its
/// first byte, `{`, occurs in it only there, so a mismatch restarts the
/// match at that byte: no longer prefix can be under way.)
fn refusal_end(mut matched: usize, buf: &[u8]) -> (Option<usize>, usize) {
    for (i, &byte) in buf.iter().enumerate() {
        matched = if byte == REFUSAL_BODY[matched] {
            matched + 1
        } else {
            usize::from(byte == REFUSAL_BODY[0])
        };
        if matched == REFUSAL_BODY.len() {
            return (Some(i + 1), 0);
        }
    }
    (None, matched)
}

/// One of actix-http's bodiless errors, read as a response head (not
/// matched byte for byte): an HTTP/1 status line with `400` or `431`, then
/// header lines of which one is `content-length: 0` (any case) and none a
/// `content-type`, ending the buffer with the head's blank line. What it is
/// answered with: the same status line and headers, its length and type
/// replaced, and the JSON body.
fn early_error(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let text = text.strip_suffix("\r\n\r\n")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let rest = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))?;
    let body = match rest.split(' ').next()? {
        "400" => BAD_REQUEST_BODY,
        "431" => TOO_LARGE_BODY,
        _ => return None,
    };
    let mut others = Vec::new();
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("content-type") {
            return None;
        }
        if name.eq_ignore_ascii_case("content-length") {
            empty = value.trim() == "0";
            if !empty {
                return None;
            }
        } else {
            others.push(line);
        }
    }
    if !empty {
        return None;
    }
    let mut answer = format!(
        "{status_line}\r\ncontent-type: application/json\r\n\
         x-content-type-options: nosniff\r\ncontent-length: {}\r\n",
        body.len()
    );
    for line in others {
        answer.push_str(line);
        answer.push_str("\r\n");
    }
    answer.push_str("\r\n");
    answer.push_str(body);
    Some(answer.into_bytes())
}

/// Where in `buf` one of actix-http's bodiless errors begins, and what replaces
/// it from there to the end: it is always the last answer of its connection,
/// so it ends the buffer, and a buffer that does not end a head (`\r\n\r\n`;
/// every answer with a body ends with its body) is not searched. So a `GET`
/// costs one comparison of four bytes here.
fn find_error(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let from = buf.len().saturating_sub(LONGEST_HEAD);
    (from..buf.len())
        .filter(|&at| buf[at..].starts_with(b"HTTP/1."))
        .find_map(|at| Some((at, early_error(&buf[at..])?)))
}

impl<T: AsyncWrite + Unpin> JsonEarlyErrors<T> {
    /// Writes what is pending, if anything; ready when nothing is.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending = Vec::new();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonEarlyErrors<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Refused: the rest of what the client sent is not read (end of
        // stream), so no request behind the refused one is parsed.
        if self.ended || self.refusal.is_raised() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonEarlyErrors<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_pending(cx))?;
        if this.ended {
            // After the refusal: taken, and dropped.
            return Poll::Ready(Ok(buf.len()));
        }
        if this.refusal.is_raised() {
            let (end, _) = refusal_end(this.matched, buf);
            let upto = end.unwrap_or(buf.len());
            let n = ready!(Pin::new(&mut this.io).poll_write(cx, &buf[..upto]))?;
            let (done, matched) = refusal_end(this.matched, &buf[..n]);
            this.matched = matched;
            if done.is_some() {
                this.ended = true;
                // What followed the refusal in this buffer is dropped too.
                return Poll::Ready(Ok(buf.len()));
            }
            return Poll::Ready(Ok(n));
        }
        match find_error(buf) {
            // The bytes before the error go out as they are; the error comes
            // at the start of the next write.
            Some((at, _)) if at > 0 => Pin::new(&mut this.io).poll_write(cx, &buf[..at]),
            Some((_, answer)) => {
                this.pending = answer;
                // Taken: it is written by this call or the next ones, before anything else.
                let _ = this.poll_pending(cx)?;
                Poll::Ready(Ok(buf.len()))
            }
            None => Pin::new(&mut this.io).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &str = "date: Tue, 01 Dec 2026 14:37:00 GMT\r\n";

    fn actix_error(status_line: &str) -> Vec<u8> {
        format!("{status_line}\r\ncontent-length: 0\r\nconnection: close\r\n{DATE}\r\n")
            .into_bytes()
    }

    #[test]
    fn actix_https_bodiless_errors_get_a_json_body_and_keep_their_headers() {
        for (status_line, detail) in [
            ("HTTP/1.1 400 Bad Request", BAD_REQUEST_BODY),
            (
                "HTTP/1.1 431 Request Header Fields Too Large",
                TOO_LARGE_BODY,
            ),
            ("HTTP/1.0 400 Bad Request", BAD_REQUEST_BODY),
        ] {
            let written = actix_error(status_line);
            let (at, answer) = find_error(&written).unwrap();
            assert_eq!(at, 0);
            let answer = String::from_utf8(answer).unwrap();
            let expected = format!(
                "{status_line}\r\ncontent-type: application/json\r\n\
                 x-content-type-options: nosniff\r\ncontent-length: {}\r\n\
                 connection: close\r\n{DATE}\r\n{detail}",
                detail.len()
            );
            assert_eq!(answer, expected);
            let body: serde_json::Value = serde_json::from_str(detail).unwrap();
            assert!(body["detail"].is_string());
        }
    }

    #[test]
    fn the_head_is_read_whatever_its_order_case_and_reason_phrase() {
        let written =
            format!("HTTP/1.1 400 Bad\r\n{DATE}Content-Length:0\r\nConnection: close\r\n\r\n");
        let (_, answer) = find_error(written.as_bytes()).unwrap();
        let answer = String::from_utf8(answer).unwrap();
        assert_eq!(
            answer,
            format!(
                "HTTP/1.1 400 Bad\r\ncontent-type: application/json\r\n\
                 x-content-type-options: nosniff\r\ncontent-length: {}\r\n\
                 {DATE}Connection: close\r\n\r\n{BAD_REQUEST_BODY}",
                BAD_REQUEST_BODY.len()
            )
        );
    }

    #[test]
    fn an_error_after_pipelined_answers_is_found_where_it_begins() {
        let mut written = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        let at = written.len();
        written.extend(actix_error("HTTP/1.1 400 Bad Request"));
        assert_eq!(find_error(&written).map(|(at, _)| at), Some(at));
    }

    #[test]
    fn the_refusals_body_is_the_answer_the_api_gives() {
        let body = actix_web::body::to_bytes(crate::errors::both_lengths().into_body());
        let body = futures_util::FutureExt::now_or_never(body)
            .unwrap()
            .unwrap();
        assert_eq!(&body[..], REFUSAL_BODY);
    }

    #[test]
    fn the_refusals_end_is_found_whole_or_split_across_writes() {
        let answer = [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 79\r\n\r\n"[..],
            REFUSAL_BODY,
            b"HTTP/1.1 200 OK\r\n",
        ]
        .concat();
        let end = answer.len() - b"HTTP/1.1 200 OK\r\n".len();
        assert_eq!(refusal_end(0, &answer), (Some(end), 0));
        // Split anywhere, the end is found in the second part, where it is.
        for split in 1..end {
            let (none, matched) = refusal_end(0, &answer[..split]);
            assert_eq!(none, None, "{split}");
            assert_eq!(refusal_end(matched, &answer[split..]).0, Some(end - split));
        }
        // A body that only begins like it, then the body: found at its end.
        let near = [&br#"{"detail":"a request may"#[..], REFUSAL_BODY].concat();
        assert_eq!(refusal_end(0, &near).0, Some(near.len()));
    }

    #[test]
    fn every_other_answer_passes_untouched() {
        // A handler's 400 has a JSON body; a HEAD's answer has its GET's
        // length; an error with a type of its own is someone's answer.
        for written in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\n\r\n{\"detail\":\"bad\"}    "[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n",
            b"data: HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert_eq!(
                find_error(written),
                None,
                "{}",
                String::from_utf8_lossy(written)
            );
        }
    }
}
