//! Framing: a 4-byte big-endian length, then that many bytes of body. The length is checked
//! against the connection's current maximum BEFORE any buffer is allocated (iperf3's
//! CVE-2023-38403 was a JSON length that wrapped around its allocation), and a body is read
//! with exactly its length, so nothing after a frame is consumed (a data connection's first
//! frame is followed by the workload's own bytes).

use std::io::{self, Read, Write};

/// Bytes of the length prefix.
pub const HEADER: usize = 4;

/// Largest frame an unauthenticated peer may send: a Hello, a data connection's token or an
/// authentication proof all fit well within it. Unauthenticated connections cost no more.
pub const PREAUTH_MAX: usize = 512;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("empty frame")]
    Empty,
    #[error("the peer closed the connection")]
    Closed,
    #[error("the peer closed the connection in the middle of a frame")]
    Truncated,
    #[error("no frame within the time limit")]
    Timeout,
    #[error("{0}")]
    Io(io::Error),
}

/// The body length a header announces, refused when above `max` or zero.
pub fn check_header(h: [u8; HEADER], max: usize) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(h) as usize;
    if len == 0 {
        return Err(FrameError::Empty);
    }
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(len)
}

fn io_err(e: io::Error, started: bool) -> FrameError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => FrameError::Timeout,
        io::ErrorKind::UnexpectedEof if started => FrameError::Truncated,
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => FrameError::Closed,
        _ => FrameError::Io(e),
    }
}

/// Read one frame of at most `max` body bytes.
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut h = [0u8; HEADER];
    // The first byte apart: EOF before it is a close, after it a truncation.
    r.read_exact(&mut h[..1]).map_err(|e| io_err(e, false))?;
    r.read_exact(&mut h[1..]).map_err(|e| io_err(e, true))?;
    let len = check_header(h, max)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| io_err(e, true))?;
    Ok(body)
}

/// Read one frame of at most `max` body bytes from a TCP stream, all of it before `deadline`:
/// each read waits only for what is left, so a peer trickling a byte at a time cannot stretch
/// the handshake past its limit.
pub fn read_frame_by(
    s: &mut std::net::TcpStream,
    max: usize,
    deadline: std::time::Instant,
) -> Result<Vec<u8>, FrameError> {
    fn fill(
        s: &mut std::net::TcpStream,
        buf: &mut [u8],
        deadline: std::time::Instant,
        started: bool,
    ) -> Result<(), FrameError> {
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(FrameError::Timeout);
            }
            s.set_read_timeout(Some(left)).map_err(FrameError::Io)?;
            match s.read(&mut buf[got..]) {
                Ok(0) if started || got > 0 => return Err(FrameError::Truncated),
                Ok(0) => return Err(FrameError::Closed),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e, started || got > 0)),
            }
        }
        Ok(())
    }
    let mut h = [0u8; HEADER];
    fill(s, &mut h, deadline, false)?;
    let len = check_header(h, max)?;
    let mut body = vec![0u8; len];
    fill(s, &mut body, deadline, true)?;
    Ok(body)
}

/// A frame's bytes: header and body.
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Write one frame (one write call, so a frame is never interleaved with another writer's).
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    w.write_all(&encode(body))?;
    w.flush()
}

/// Split a byte buffer into frames as a reader would see them (for the fuzz test and the
/// decoder's unit tests): the frames, then the error that stopped it (None = clean end).
pub fn split(mut bytes: &[u8], max: usize) -> (Vec<Vec<u8>>, Option<FrameError>) {
    let mut out = Vec::new();
    loop {
        if bytes.is_empty() {
            return (out, None);
        }
        match read_frame(&mut bytes, max) {
            Ok(f) => out.push(f),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_over_the_limit_is_refused_before_allocation() {
        // 4 GiB - 1 announced: refused from the header alone (nothing follows it).
        let e = read_frame(&mut &[0xff, 0xff, 0xff, 0xff][..], PREAUTH_MAX).unwrap_err();
        assert!(matches!(e, FrameError::TooLarge { len: 0xffff_ffff, max: PREAUTH_MAX }), "{e}");
    }

    #[test]
    fn frames_round_trip_and_leave_what_follows() {
        let mut bytes = encode(b"hello");
        bytes.extend_from_slice(b"rest");
        let mut r = &bytes[..];
        assert_eq!(read_frame(&mut r, 16).unwrap(), b"hello");
        assert_eq!(r, b"rest");
    }

    #[test]
    fn truncation_and_close_are_told_apart() {
        assert!(matches!(read_frame(&mut &[][..], 16), Err(FrameError::Closed)));
        assert!(matches!(read_frame(&mut &[0, 0][..], 16), Err(FrameError::Truncated)));
        assert!(matches!(read_frame(&mut &[0, 0, 0, 5, b'a'][..], 16), Err(FrameError::Truncated)));
        assert!(matches!(read_frame(&mut &[0, 0, 0, 0][..], 16), Err(FrameError::Empty)));
    }
}
