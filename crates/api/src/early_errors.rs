//! JSON bodies for the two errors actix-http answers before any handler runs:
//! a request head it cannot parse (`400`, a request line longer than a URI may
//! be, say) and one larger than its 128 KiB buffer (`431`). actix-http's
//! HTTP/1 dispatcher writes these itself, with no body and no hook to give
//! them one, and then closes the connection.
//!
//! [`JsonEarlyErrors`] wraps a connection's socket and rewrites those two
//! answers as they are written: the same status and headers, plus the JSON
//! body every other error has (`{"detail": "..."}`, [`crate::errors`]). It
//! recognises them by what only actix-http's own answers are: a `400` or
//! `431` with `content-length: 0` (every error of this API's handlers has a
//! JSON body, so a non-zero length). Everything else passes through untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use actix_web::rt::net::TcpStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// actix-http's `400` for a request head it could not parse.
const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n";
/// actix-http's `431` for a request head larger than its buffer.
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n";

/// The JSON body of actix-http's `400`.
const BAD_REQUEST_BODY: &str =
    r#"{"detail":"Bad Request: the request line or headers could not be parsed"}"#;
/// The JSON body of actix-http's `431`.
const TOO_LARGE_BODY: &str = r#"{"detail":"Request Header Fields Too Large: the request head has more than 96 header fields or exceeds 128 KiB"}"#;

/// A connection whose early errors get JSON bodies (see the module's doc).
pub struct JsonEarlyErrors<T = TcpStream> {
    io: T,
    /// A rewritten answer not yet written to `io`; written before anything else.
    pending: Vec<u8>,
    /// How much of `pending` is written.
    written: usize,
}

impl<T> JsonEarlyErrors<T> {
    pub fn new(io: T) -> Self {
        Self {
            io,
            pending: Vec::new(),
            written: 0,
        }
    }

    /// The socket underneath.
    pub fn get_ref(&self) -> &T {
        &self.io
    }
}

/// The rewrite, if `buf` begins with one of actix-http's bodiless errors
/// whose whole head it holds: how many bytes of `buf` it replaces, and what
/// replaces them.
fn rewrite(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
    let (prefix, body) = if buf.starts_with(BAD_REQUEST) {
        (BAD_REQUEST, BAD_REQUEST_BODY)
    } else if buf.starts_with(TOO_LARGE) {
        (TOO_LARGE, TOO_LARGE_BODY)
    } else {
        return None;
    };
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    // The status line, then our two headers in place of `content-length: 0`,
    // then actix's other headers (connection, date), then the body.
    let status_line = prefix.len() - b"content-length: 0\r\n".len();
    let mut answer = Vec::with_capacity(end + 64 + body.len());
    answer.extend_from_slice(&buf[..status_line]);
    answer.extend_from_slice(b"content-type: application/json\r\n");
    answer.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    answer.extend_from_slice(&buf[prefix.len()..end]);
    answer.extend_from_slice(body.as_bytes());
    Some((end, answer))
}

/// Where in `buf` one of actix-http's bodiless errors begins, if it does: it
/// is always the last answer of its connection, so it ends the buffer, and a
/// buffer that does not end a head (`\r\n\r\n`; every answer with a body
/// ends with its body) is not searched. So a `GET` costs one comparison of
/// four bytes here.
fn find_error(buf: &[u8]) -> Option<usize> {
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    // The head holds the status line, `content-length`, `connection` and
    // `date`: well under this many bytes.
    const LONGEST_HEAD: usize = 256;
    let from = buf.len().saturating_sub(LONGEST_HEAD);
    let tail = &buf[from..];
    [BAD_REQUEST, TOO_LARGE]
        .iter()
        .filter_map(|head| tail.windows(head.len()).position(|w| w == *head))
        .min()
        .map(|at| from + at)
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
        match find_error(buf) {
            // The bytes before the error go out as they are; the error comes
            // at the start of the next write.
            Some(0) => {}
            Some(at) => return Pin::new(&mut this.io).poll_write(cx, &buf[..at]),
            None => return Pin::new(&mut this.io).poll_write(cx, buf),
        }
        match rewrite(buf) {
            Some((replaced, answer)) => {
                this.pending = answer;
                // Taken: it is written by this call or the next ones, before anything else.
                let _ = this.poll_pending(cx)?;
                Poll::Ready(Ok(replaced))
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
        ] {
            let written = actix_error(status_line);
            assert_eq!(find_error(&written), Some(0));
            let (replaced, answer) = rewrite(&written).unwrap();
            assert_eq!(replaced, written.len());
            let answer = String::from_utf8(answer).unwrap();
            let expected = format!(
                "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n{DATE}\r\n{detail}",
                detail.len()
            );
            assert_eq!(answer, expected);
            let body: serde_json::Value = serde_json::from_str(detail).unwrap();
            assert!(body["detail"].is_string());
        }
    }

    #[test]
    fn an_error_after_pipelined_answers_is_found_where_it_begins() {
        let mut written = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        let at = written.len();
        written.extend(actix_error("HTTP/1.1 400 Bad Request"));
        assert_eq!(find_error(&written), Some(at));
    }

    #[test]
    fn every_other_answer_passes_untouched() {
        // A handler's 400 has a JSON body; a HEAD's answer has its GET's length.
        for written in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\n\r\n{\"detail\":\"bad\"}    "[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
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
