//! The one transport under [`Client`](crate::Client): a line out, a line back, whether the
//! daemon is this machine's Unix socket or a remote daemon's WebSocket door (`ws://`, or
//! `wss://` over rustls). Every method goes through [`Transport::send`] and [`Transport::recv`],
//! so no method has a code path per transport.

use std::io::{self, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use tungstenite::protocol::WebSocket;
use tungstenite::{Error as WsError, Message};

use crate::wire::{self, Line};

/// Read buffer of a Unix-socket connection.
const UNIX_READ_BUFFER: usize = 64 * 1024;

/// A byte stream to a remote door: plain TCP or TLS over it.
#[derive(Debug)]
pub(crate) enum NetStream {
    /// `ws://`.
    Plain(TcpStream),
    /// `wss://`.
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl NetStream {
    /// The TCP connection under it.
    pub(crate) fn tcp_ref(&self) -> &TcpStream {
        self.tcp()
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            NetStream::Plain(s) => s,
            NetStream::Tls(s) => &s.sock,
        }
    }
}

impl Read for NetStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            NetStream::Plain(s) => s.read(buf),
            NetStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for NetStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            NetStream::Plain(s) => s.write(buf),
            NetStream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            NetStream::Plain(s) => s.flush(),
            NetStream::Tls(s) => s.flush(),
        }
    }
}

/// The socket under a [`Transport`], duplicated so another thread can shut it down.
#[derive(Debug)]
pub(crate) enum ShutdownHandle {
    /// The local daemon's socket.
    Unix(UnixStream),
    /// A remote door's TCP connection.
    Tcp(TcpStream),
}

impl ShutdownHandle {
    /// Shut the connection down in both directions (a blocked call returns at once).
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            ShutdownHandle::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            ShutdownHandle::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

/// A connection to a daemon.
#[derive(Debug)]
pub(crate) enum Transport {
    /// The local daemon's socket: one JSON line per message.
    Unix {
        /// Requests go out here.
        writer: UnixStream,
        /// Answers come in here.
        reader: BufReader<UnixStream>,
    },
    /// A remote door: one JSON-RPC message per text message.
    Ws(Box<WebSocket<NetStream>>),
}

impl Transport {
    /// A Unix-socket transport over a connected stream.
    pub(crate) fn unix(stream: UnixStream) -> io::Result<Transport> {
        let reader = stream.try_clone()?;
        Ok(Transport::Unix {
            writer: stream,
            reader: BufReader::with_capacity(UNIX_READ_BUFFER, reader),
        })
    }

    /// A second handle on the connection's socket, to shut it down from another thread.
    pub(crate) fn shutdown_handle(&self) -> io::Result<ShutdownHandle> {
        match self {
            Transport::Unix { writer, .. } => writer.try_clone().map(ShutdownHandle::Unix),
            Transport::Ws(ws) => ws.get_ref().tcp().try_clone().map(ShutdownHandle::Tcp),
        }
    }

    /// Whether an answer has begun to arrive (bytes buffered or readable), waiting at most
    /// `timeout` for it.
    pub(crate) fn readable(&mut self, timeout: Duration) -> io::Result<bool> {
        use rustix::event::{PollFd, PollFlags, poll};
        use std::os::fd::AsFd;
        let fd = match self {
            Transport::Unix { reader, .. } => {
                if !reader.buffer().is_empty() {
                    return Ok(true);
                }
                reader.get_ref().as_fd()
            }
            Transport::Ws(ws) => ws.get_ref().tcp().as_fd(),
        };
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let ts = rustix::event::Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: timeout.subsec_nanos().into(),
        };
        match poll(&mut fds, Some(&ts)) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Send one request (`line` without its newline) within `timeout`.
    pub(crate) fn send(&mut self, line: &[u8], timeout: Duration) -> io::Result<()> {
        match self {
            Transport::Unix { writer, .. } => {
                writer.set_write_timeout(Some(timeout))?;
                writer.write_all(line)?;
                writer.write_all(b"\n")
            }
            Transport::Ws(ws) => {
                ws.get_ref().tcp().set_write_timeout(Some(timeout))?;
                let text = String::from_utf8_lossy(line).into_owned();
                ws.send(Message::text(text)).map_err(ws_io)
            }
        }
    }

    /// Receive one answer into `buf` (at most `max` bytes), waiting at most `timeout`.
    pub(crate) fn recv(
        &mut self,
        buf: &mut Vec<u8>,
        max: usize,
        timeout: Duration,
    ) -> io::Result<Line> {
        match self {
            Transport::Unix { reader, .. } => {
                reader.get_ref().set_read_timeout(Some(timeout))?;
                wire::read_line_bounded(reader, buf, max)
            }
            Transport::Ws(ws) => {
                ws.get_ref().tcp().set_read_timeout(Some(timeout))?;
                buf.clear();
                loop {
                    match ws.read() {
                        Ok(Message::Text(text)) => {
                            if text.len() > max {
                                return Ok(Line::TooLarge);
                            }
                            buf.extend_from_slice(text.as_bytes());
                            return Ok(Line::Complete);
                        }
                        Ok(Message::Close(_)) => return Ok(Line::Eof),
                        // Pings are answered by the library on the next read or write.
                        Ok(_) => {}
                        Err(WsError::Capacity(_)) => return Ok(Line::TooLarge),
                        Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => {
                            return Ok(Line::Eof);
                        }
                        Err(e) => return Err(ws_io(e)),
                    }
                }
            }
        }
    }
}

impl Transport {
    /// Receive the `len` raw bytes that follow a binary read's answer, waiting at most
    /// `timeout` for each piece: on the Unix socket the bytes right after the answer's line, on
    /// the WebSocket door the binary message right after its text message.
    pub(crate) fn recv_payload(&mut self, len: usize, timeout: Duration) -> io::Result<Vec<u8>> {
        match self {
            Transport::Unix { reader, .. } => {
                reader.get_ref().set_read_timeout(Some(timeout))?;
                let mut bytes = vec![0u8; len];
                // Past what is buffered, a large read goes straight from the socket into `bytes`.
                reader.read_exact(&mut bytes)?;
                Ok(bytes)
            }
            Transport::Ws(ws) => {
                ws.get_ref().tcp().set_read_timeout(Some(timeout))?;
                loop {
                    match ws.read() {
                        Ok(Message::Binary(bytes)) if bytes.len() == len => {
                            return Ok(Vec::from(bytes));
                        }
                        Ok(Message::Binary(bytes)) => {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "{} bytes came where the answer announced {len}",
                                    bytes.len()
                                ),
                            ));
                        }
                        Ok(Message::Text(_)) => {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "a text message came where the read's bytes were announced",
                            ));
                        }
                        Ok(Message::Close(_)) => {
                            return Err(io::Error::new(
                                io::ErrorKind::ConnectionReset,
                                "the connection is closed",
                            ));
                        }
                        // Pings are answered by the library on the next read or write.
                        Ok(_) => {}
                        Err(e) => return Err(ws_io(e)),
                    }
                }
            }
        }
    }
}

/// A WebSocket error as the I/O error the client already knows how to word.
fn ws_io(e: WsError) -> io::Error {
    match e {
        WsError::Io(e) => e,
        WsError::ConnectionClosed | WsError::AlreadyClosed => {
            io::Error::new(io::ErrorKind::ConnectionReset, "the connection is closed")
        }
        WsError::Protocol(p) => {
            io::Error::new(io::ErrorKind::ConnectionReset, format!("WebSocket protocol: {p}"))
        }
        other => io::Error::other(other.to_string()),
    }
}
