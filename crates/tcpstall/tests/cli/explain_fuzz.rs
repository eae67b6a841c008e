//! Fuzz-style end-to-end test of `tcpstall explain --format json` (decode -> flows -> classify
//! -> JSON) on damaged copies of the kept captures: bit flips, truncations, corrupted length
//! fields, splices of two captures, inserted and deleted bytes. Seeded, time-bounded:
//! TCPSTALL_FUZZ_SECS (default 20 s when CI is set, 4 s otherwise) and TCPSTALL_FUZZ_SEED.
//! A failing input is kept on disk and its path printed with the seed and iteration.
//!
//! The contract (docs: bad input gets a one-line error and a non-zero exit, never a panic):
//! exit 0, 1 (damaged file, report of what came before) or 2 (unusable input); never 101; no
//! "panicked" anywhere; a non-zero exit says why in exactly one stderr line; exit 0 and 1 print
//! one valid JSON document.

use crate::support::tcpstall;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// splitmix64: a seeded generator, enough for choosing mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn captures() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/captures")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .filter(|(_, d)| d.len() <= 128 << 10)
        .collect();
    v.sort();
    v
}

/// Offsets of the 16-byte record headers of a little-endian pcap (the kept captures are).
fn pcap_records(d: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    if d.len() < 24 || d[..4] != [0xd4, 0xc3, 0xb2, 0xa1] && d[..4] != [0x4d, 0x3c, 0xb2, 0xa1] {
        return out;
    }
    let mut at = 24;
    while at + 16 <= d.len() {
        out.push(at);
        at += 16 + u32::from_le_bytes(d[at + 8..at + 12].try_into().unwrap()) as usize;
    }
    out
}

/// Interesting values for a corrupted length field.
const LENGTHS: [u32; 10] = [0, 1, 4, 19, 20, 40, 0x7fff, 0xffff, 0x7fff_ffff, 0xffff_ffff];

fn mutate(rng: &mut Rng, corpus: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
    let (name, base) = &corpus[rng.below(corpus.len())];
    let mut d = base.clone();
    let what = match rng.below(7) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            "bit flips"
        }
        1 => {
            d.truncate(rng.below(d.len()));
            "truncation"
        }
        2 => {
            // A pcap record's captured or original length, or an IP/TCP length byte pair in it.
            let recs = pcap_records(&d);
            if recs.is_empty() {
                let i = rng.below(d.len().saturating_sub(4));
                d[i..i + 4].copy_from_slice(&LENGTHS[rng.below(LENGTHS.len())].to_le_bytes());
            } else {
                let r = recs[rng.below(recs.len())];
                match rng.below(3) {
                    0 => d[r + 8..r + 12].copy_from_slice(&LENGTHS[rng.below(LENGTHS.len())].to_le_bytes()),
                    1 => d[r + 12..r + 16].copy_from_slice(&LENGTHS[rng.below(LENGTHS.len())].to_le_bytes()),
                    _ => {
                        // Within the frame: IPv4 total length / IHL / TCP data offset region.
                        let at = r + 16 + rng.below(60);
                        if at + 2 <= d.len() {
                            let v = LENGTHS[rng.below(LENGTHS.len())] as u16;
                            d[at..at + 2].copy_from_slice(&v.to_be_bytes());
                        }
                    }
                }
            }
            "length-field corruption"
        }
        3 => {
            // Splice: the head of this capture, the tail of another.
            let (_, other) = &corpus[rng.below(corpus.len())];
            d.truncate(rng.below(d.len()));
            d.extend_from_slice(&other[rng.below(other.len())..]);
            "splice"
        }
        4 => {
            let i = rng.below(d.len());
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            d.splice(i..i, bytes);
            "insertion"
        }
        5 => {
            let i = rng.below(d.len());
            let n = (1 + rng.below(16)).min(d.len() - i);
            d.drain(i..i + n);
            "deletion"
        }
        _ => {
            // The link-type field of a pcap header: unknown types, FCS flag bits.
            if d.len() >= 24 {
                let lt = [0x2400_0001u32, 0x5000_0001, 9, 50, 104, 51, 147, 0xffff_ffff][rng.below(8)];
                d[20..24].copy_from_slice(&lt.to_le_bytes());
            }
            "link type"
        }
    };
    (format!("{what} of {name}"), d)
}

/// Runs explain on `path` with a deadline; returns (exit code, stdout, stderr).
fn explain(path: &Path) -> (Option<i32>, Vec<u8>, String) {
    let bin = assert_cmd::cargo::cargo_bin("tcpstall");
    let mut child = Command::new(bin)
        .args(["explain", "--format", "json"])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpstall");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).ok();
        v
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let (out, err) = (o.join().unwrap(), e.join().unwrap());
    (status.map(|s| s.code().unwrap_or(-1)), out, err)
}

pub(crate) fn explain_never_panics_on_damaged_captures() {
    let secs = std::env::var("TCPSTALL_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if std::env::var_os("CI").is_some() { 20 } else { 4 });
    let seed = std::env::var("TCPSTALL_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x7c95_7a11u64);
    let corpus = captures();
    assert!(corpus.len() >= 10, "kept captures found: {}", corpus.len());
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed);
    let mut codes = [0u32; 3];
    let t0 = Instant::now();
    let mut iter = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        iter += 1;
        let (what, data) = mutate(&mut rng, &corpus);
        let path = dir.path().join(format!("case-{iter}.pcap"));
        std::fs::write(&path, &data).unwrap();
        let (code, out, err) = explain(&path);
        let lines = err.lines().filter(|l| !l.trim().is_empty()).count();
        let json_ok = serde_json::from_slice::<serde_json::Value>(&out).is_ok();
        let ok = match code {
            Some(0) => json_ok && !err.contains("panicked"),
            Some(1) => json_ok && lines == 1 && !err.contains("panicked"),
            Some(2) => lines == 1 && !err.contains("panicked"),
            _ => false,
        };
        if !ok {
            let keep = std::env::temp_dir().join(format!("tcpstall-fuzz-{seed}-{iter}.pcap"));
            std::fs::write(&keep, &data).unwrap();
            panic!(
                "seed {seed} iteration {iter} ({what}): exit {code:?}, stderr {err:?}, stdout JSON valid: {json_ok}; \
                 input kept at {}",
                keep.display()
            );
        }
        codes[code.unwrap() as usize] += 1;
        std::fs::remove_file(&path).ok();
    }
    eprintln!("explain fuzz: seed {seed}, {iter} damaged captures in {secs} s, exits 0/1/2: {codes:?}");
    assert!(iter >= 10, "only {iter} runs in {secs} s");
}

pub(crate) fn explain_says_which_tunnels_it_could_not_open() {
    // An IPsec ESP packet (RFC 4303, IP protocol 50) and a TCP packet inside VXLAN (RFC 7348).
    let tcp = {
        let mut v = Vec::new();
        etherparse_free_tcp(&mut v);
        v
    };
    let ip = |proto: u8, payload: &[u8]| {
        let t = ((20 + payload.len()) as u16).to_be_bytes();
        [&[0x45, 0, t[0], t[1], 0, 1, 0, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2][..], payload].concat()
    };
    let eth = |et: u16, p: &[u8]| [&[2u8; 6][..], &[1; 6], &et.to_be_bytes(), p].concat();
    let esp = eth(0x0800, &ip(50, &[0; 32]));
    let vx = [&[8u8, 0, 0, 0, 0, 0, 1, 0][..], &eth(0x0800, &tcp)].concat();
    let udp =
        [&40000u16.to_be_bytes()[..], &4789u16.to_be_bytes(), &((8 + vx.len()) as u16).to_be_bytes(), &[0, 0], &vx]
            .concat();
    let vxlan = eth(0x0800, &ip(17, &udp));
    let mut file = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0];
    for (i, f) in [esp.clone(), esp, vxlan].iter().enumerate() {
        for v in [1u32, i as u32, f.len() as u32, f.len() as u32] {
            file.extend_from_slice(&v.to_le_bytes());
        }
        file.extend_from_slice(f);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tunnels.pcap");
    std::fs::write(&path, &file).unwrap();
    let out = tcpstall().arg("explain").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("3 frames, 1 TCP packets"), "{text}");
    assert!(text.contains("2 packets inside IPsec ESP (RFC 4303), not decoded"), "{text}");
    let out = tcpstall().args(["explain", "--format", "json"]).arg(&path).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decode"]["not_decoded_inside"]["IPsec ESP (RFC 4303)"], 2);
}

/// An IPv4/TCP packet 10.0.0.1:5000 -> 10.0.0.2:80, ACK, 5 payload bytes (RFC 791, RFC 9293).
fn etherparse_free_tcp(v: &mut Vec<u8>) {
    v.extend_from_slice(&[0x45, 0, 0, 45, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    v.extend_from_slice(&[0x13, 0x88, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    v.extend_from_slice(b"hello");
}
