//! The pre-shared key and what is computed from it. Every MAC is HMAC-SHA256 (RFC 2104 with
//! SHA-256, FIPS 180-4) from the RustCrypto `hmac` and `sha2` crates; comparisons go through
//! `Mac::verify_slice`, which is constant-time. Nothing here is hand-written cryptography:
//! only the choice of what is MAC'd.
//!
//! Handshake (both nonces fresh, 32 bytes from the OS generator):
//!   client -> server  Hello { nc }
//!   server -> client  Challenge { ns, proof_s = HMAC(K, "tcpstall-remote/1 server" | nc | ns) }
//!   client -> server  Auth { proof_c = HMAC(K, "tcpstall-remote/1 client" | nc | ns) }
//! The role label is inside each proof, so a server's proof can never be sent back as a
//! client's (reflection); both nonces are inside, so a recorded Auth is worthless against a
//! new server nonce (replay). Then every message in either direction carries
//! HMAC(Ks, direction | counter | body) with the session key
//! Ks = HMAC(K, "tcpstall-remote/1 session" | nc | ns) and a counter per direction, so a
//! message cannot be altered, dropped, reordered, replayed or reflected without the
//! receiver noticing.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a key, a nonce, a tag.
pub const KEY_LEN: usize = 32;
pub const NONCE_LEN: usize = 32;
pub const TAG_LEN: usize = 32;

const LABEL_SERVER: &[u8] = b"tcpstall-remote/1 server";
const LABEL_CLIENT: &[u8] = b"tcpstall-remote/1 client";
const LABEL_SESSION: &[u8] = b"tcpstall-remote/1 session";
const DIR_TO_SERVER: &[u8] = b"c2s";
const DIR_TO_CLIENT: &[u8] = b"s2c";

/// A pre-shared key.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    pub fn from_bytes(b: [u8; KEY_LEN]) -> Key {
        Key(b)
    }

    /// The key of `--insecure-no-auth`: all zeros, known to everyone. The protocol stays the
    /// same; it authenticates nothing.
    pub fn insecure() -> Key {
        Key([0; KEY_LEN])
    }

    /// A fresh random key from the OS generator.
    pub fn generate() -> Result<Key, KeyError> {
        Ok(Key(random()?))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length (RFC 2104 section 2): this never fails.
        <HmacSha256 as Mac>::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }
}

/// 32 bytes from the OS generator (getrandom(2) through rand's OsRng).
pub fn random() -> Result<[u8; 32], KeyError> {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut b)?;
    Ok(b)
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Exactly N bytes from hex, or None.
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(s[2 * i])? << 4 | digit(s[2 * i + 1])?;
    }
    Some(out)
}

/// Why a key file could not be written or read, or a nonce drawn: one line for people.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the OS random generator failed: {0}")]
    Random(#[from] rand::Error),
    #[error("cannot create key file {}: {source}", .path.display())]
    Create { path: PathBuf, source: std::io::Error },
    #[error("cannot write key file {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot read key file {}: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("key file {} is not a regular file", .path.display())]
    NotAFile { path: PathBuf },
    #[error("key file {} is readable by group or others (mode {mode:o}): chmod 600 {} first", .path.display(), .path.display())]
    Exposed { path: PathBuf, mode: u32 },
    #[error("key file {} is not a tcpstall key (64 hex digits; `tcpstall serve --init-key FILE` writes one)", .path.display())]
    NotAKey { path: PathBuf },
}

/// Write a new key to `path` (64 hex digits and a newline), mode 0600, refusing to replace a
/// file that exists.
pub fn init_key_file(path: &Path) -> Result<(), KeyError> {
    let key = Key::generate()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| KeyError::Create { path: path.into(), source })?;
    // create_new + mode: the umask may only remove bits, never add group/other ones.
    f.write_all(format!("{}\n", hex(&key.0)).as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|source| KeyError::Write { path: path.into(), source })
}

/// Read a key file: refused when group or others may read it, or when it is not 64 hex digits
/// (an optional trailing newline) or 32 raw bytes.
pub fn read_key_file(path: &Path) -> Result<Key, KeyError> {
    let read = |source| KeyError::Read { path: path.into(), source };
    let f = std::fs::File::open(path).map_err(read)?;
    let meta = f.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(KeyError::NotAFile { path: path.into() });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Exposed { path: path.into(), mode });
    }
    let mut text = Vec::with_capacity(80);
    f.take(80).read_to_end(&mut text).map_err(read)?;
    if text.len() == KEY_LEN {
        let mut k = [0u8; KEY_LEN];
        k.copy_from_slice(&text);
        return Ok(Key(k));
    }
    let s = std::str::from_utf8(&text).unwrap_or("").trim_end_matches(['\n', '\r']);
    unhex::<KEY_LEN>(s).map(Key).ok_or_else(|| KeyError::NotAKey { path: path.into() })
}

fn proof(key: &Key, label: &[u8], nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN]) -> HmacSha256 {
    let mut m = key.mac();
    m.update(label);
    m.update(nc);
    m.update(ns);
    m
}

/// The server's proof of the key for this pair of nonces.
pub fn server_proof(key: &Key, nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN]) -> [u8; TAG_LEN] {
    proof(key, LABEL_SERVER, nc, ns).finalize().into_bytes().into()
}

/// The client's proof of the key for this pair of nonces.
pub fn client_proof(key: &Key, nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN]) -> [u8; TAG_LEN] {
    proof(key, LABEL_CLIENT, nc, ns).finalize().into_bytes().into()
}

/// Check a server's proof (constant-time).
pub fn verify_server(key: &Key, nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN], tag: &[u8]) -> bool {
    proof(key, LABEL_SERVER, nc, ns).verify_slice(tag).is_ok()
}

/// Check a client's proof (constant-time).
pub fn verify_client(key: &Key, nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN], tag: &[u8]) -> bool {
    proof(key, LABEL_CLIENT, nc, ns).verify_slice(tag).is_ok()
}

/// Which end of the control connection a `Channel` belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// The authenticated channel of one session: seals outgoing bodies and opens incoming ones.
pub struct Channel {
    key: Key,
    role: Role,
    sent: u64,
    received: u64,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Channel({:?}, sent {}, received {})", self.role, self.sent, self.received)
    }
}

/// Why an incoming message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("message shorter than its authentication tag")]
    Short,
    #[error("message authentication failed (altered, replayed or out of order)")]
    BadTag,
}

impl Channel {
    /// The channel after a handshake with these nonces.
    pub fn new(key: &Key, role: Role, nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN]) -> Channel {
        let ks: [u8; KEY_LEN] = proof(key, LABEL_SESSION, nc, ns).finalize().into_bytes().into();
        Channel { key: Key(ks), role, sent: 0, received: 0 }
    }

    fn tag(&self, dir: &[u8], counter: u64, body: &[u8]) -> HmacSha256 {
        let mut m = self.key.mac();
        m.update(dir);
        m.update(&counter.to_be_bytes());
        m.update(body);
        m
    }

    fn dirs(&self) -> (&'static [u8], &'static [u8]) {
        match self.role {
            Role::Client => (DIR_TO_SERVER, DIR_TO_CLIENT),
            Role::Server => (DIR_TO_CLIENT, DIR_TO_SERVER),
        }
    }

    /// tag | body, with the next outgoing counter.
    pub fn seal(&mut self, body: &[u8]) -> Vec<u8> {
        let (out, _) = self.dirs();
        let t = self.tag(out, self.sent, body).finalize().into_bytes();
        self.sent += 1;
        let mut v = Vec::with_capacity(TAG_LEN + body.len());
        v.extend_from_slice(&t);
        v.extend_from_slice(body);
        v
    }

    /// The body of a sealed frame, if its tag is the one expected next.
    pub fn open<'a>(&mut self, frame: &'a [u8]) -> Result<&'a [u8], OpenError> {
        if frame.len() < TAG_LEN {
            return Err(OpenError::Short);
        }
        let (tag, body) = frame.split_at(TAG_LEN);
        let (_, inc) = self.dirs();
        self.tag(inc, self.received, body).verify_slice(tag).map_err(|_| OpenError::BadTag)?;
        self.received += 1;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2 (HMAC-SHA-256, key "Jefe"): the crates compute HMAC as RFC 2104 says.
    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        let mut m = <HmacSha256 as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(hex(&m.finalize().into_bytes()), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn proofs_bind_the_role_and_both_nonces() {
        let k = Key::from_bytes([7; 32]);
        let (nc, ns) = ([1; 32], [2; 32]);
        let p = client_proof(&k, &nc, &ns);
        assert!(verify_client(&k, &nc, &ns, &p));
        // Reflection: a server's proof is not a client's.
        assert!(!verify_client(&k, &nc, &ns, &server_proof(&k, &nc, &ns)));
        // Replay against a fresh server nonce.
        assert!(!verify_client(&k, &nc, &[3; 32], &p));
        // Another key.
        assert!(!verify_client(&Key::from_bytes([8; 32]), &nc, &ns, &p));
    }

    #[test]
    fn channel_refuses_replayed_reordered_and_reflected_messages() {
        let k = Key::from_bytes([9; 32]);
        let (nc, ns) = ([1; 32], [2; 32]);
        let mut c = Channel::new(&k, Role::Client, &nc, &ns);
        let mut s = Channel::new(&k, Role::Server, &nc, &ns);
        let m0 = c.seal(b"zero");
        let m1 = c.seal(b"one");
        assert_eq!(s.open(&m0).unwrap(), b"zero");
        assert_eq!(s.open(&m0), Err(OpenError::BadTag), "replayed");
        assert_eq!(s.open(&m1).unwrap(), b"one");
        // The server's own message sent back to it.
        let back = s.seal(b"x");
        assert_eq!(s.open(&back), Err(OpenError::BadTag), "reflected");
        let mut altered = c.seal(b"two");
        *altered.last_mut().unwrap() ^= 1;
        assert_eq!(s.open(&altered), Err(OpenError::BadTag));
        assert_eq!(s.open(&[0; 5]), Err(OpenError::Short));
    }

    #[test]
    fn key_files_are_private_and_checked() {
        let dir = std::env::temp_dir().join(format!("tcpstall-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("k");
        init_key_file(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let k = read_key_file(&p).unwrap();
        assert!(init_key_file(&p).unwrap_err().to_string().contains("cannot create"), "no overwrite");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(read_key_file(&p).unwrap_err().to_string().contains("readable by group or others"));
        let q = dir.join("bad");
        std::fs::write(&q, "not a key\n").unwrap();
        std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_key_file(&q).unwrap_err().to_string().contains("not a tcpstall key"));
        assert_ne!(k, Key::insecure());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
