//! Write truth of third-party programs from `strace -f -ttt -yy -e trace=write,writev,sendto,
//! sendmsg,setsockopt -e signal=none`: each call's start time (CLOCK_REALTIME, microseconds),
//! its socket's TCP 4-tuple (`-yy`: `5<TCP:[198.18.0.1:41950->198.18.1.2:20001]>`), the bytes
//! it wrote (its return value), MSG_MORE, and the TCP_NODELAY / TCP_CORK it set.

use std::collections::HashMap;

use crate::log::{LogLine, Side};

/// A call strace split over two lines (`<unfinished ...>` then `<... resumed>`), by pid.
struct Pending {
    t_ns: u64,
    head: String,
}

/// Per socket: stream offset, NODELAY, CORK.
#[derive(Default, Clone, Copy)]
struct SockState {
    offset: u64,
    nodelay: bool,
    cork: bool,
}

/// Parses an strace output: the writes and options on TCP sockets with `port` at either end.
/// `client_ip` names the client side (the local address decides whose call it was).
pub fn parse(text: &str, port: u16, client_ip: &str) -> Vec<LogLine> {
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let mut socks: HashMap<(String, String), SockState> = HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        // `PID TIME CALL`: strace pads the pid to a width (`665   1795807460.262751 ...`).
        let Some((pid, rest)) = line.trim_start().split_once(' ') else { continue };
        let Some((ts, rest)) = rest.trim_start().split_once(' ') else { continue };
        let Some(t_ns) = parse_ts(ts) else { continue };
        let full = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_string(), Pending { t_ns, head: head.to_string() });
            continue;
        } else if rest.starts_with("<... ") {
            let Some(p) = pending.remove(pid) else { continue };
            let tail = rest.split_once("resumed>").map_or("", |(_, t)| t);
            (p.t_ns, format!("{}{}", p.head, tail))
        } else {
            (t_ns, rest.to_string())
        };
        if let Some(l) = call(full.0, &full.1, port, client_ip, &mut socks) {
            out.push(l);
        }
    }
    out
}

/// `1700000000.123456` -> ns.
fn parse_ts(s: &str) -> Option<u64> {
    let (sec, frac) = s.split_once('.')?;
    let sec: u64 = sec.parse().ok()?;
    let digits = frac.len().min(9);
    let f: u64 = frac[..digits].parse().ok()?;
    Some(sec * 1_000_000_000 + f * 10u64.pow(9 - digits as u32))
}

/// The 4-tuple of `fd<TCP:[a:p->b:q]>` right after the call's `(`.
fn tuple(args: &str) -> Option<(String, String)> {
    let start = args.find("<TCP:[")? + 6;
    let end = start + args[start..].find("]>")?;
    let (l, r) = args[start..end].split_once("->")?;
    Some((l.to_string(), r.to_string()))
}

fn port_of(a: &str) -> Option<u16> {
    a.rsplit_once(':')?.1.parse().ok()
}

fn call(
    t_ns: u64,
    s: &str,
    port: u16,
    client_ip: &str,
    socks: &mut HashMap<(String, String), SockState>,
) -> Option<LogLine> {
    let (name, args) = s.split_once('(')?;
    let (local, remote) = tuple(args)?;
    if port_of(&local) != Some(port) && port_of(&remote) != Some(port) {
        return None;
    }
    let side = if local.rsplit_once(':').map(|x| x.0) == Some(client_ip) { Side::Client } else { Side::Server };
    let ret: i64 = s.rsplit_once(") = ").and_then(|(_, r)| r.split_whitespace().next()?.parse().ok())?;
    let st = socks.entry((local.clone(), remote.clone())).or_default();
    match name {
        "setsockopt" => {
            let opt = if args.contains("TCP_NODELAY") {
                "NODELAY"
            } else if args.contains("TCP_CORK") {
                "CORK"
            } else {
                return None;
            };
            // `SOL_TCP, TCP_NODELAY, [1], 4`: the value is the bracket after the option's name.
            let after = args.split_once(&format!("TCP_{opt}, ")).map_or("", |(_, v)| v);
            let value: i64 = after.strip_prefix('[').and_then(|v| v.split(']').next()?.parse().ok()).unwrap_or(0);
            if opt == "NODELAY" {
                st.nodelay = value != 0;
            } else {
                st.cork = value != 0;
            }
            Some(LogLine::Opt { t_ns, side, opt: opt.into(), value })
        }
        "write" | "writev" | "sendto" | "sendmsg" if ret > 0 => {
            let l = LogLine::Write {
                t_ns,
                side,
                local,
                remote,
                offset: st.offset,
                len: ret as u32,
                more: args.contains("MSG_MORE"),
                nodelay: st.nodelay,
                cork: st.cork,
            };
            st.offset += ret as u64;
            Some(l)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"101   1700000000.100000 setsockopt(5<TCP:[198.18.0.1:40000->198.18.1.2:8080]>, SOL_TCP, TCP_NODELAY, [1], 4) = 0
101 1700000000.200000 write(5<TCP:[198.18.0.1:40000->198.18.1.2:8080]>, "POST /api HTTP/1.1\r\n"..., 120) = 120
202 1700000000.200500 sendto(7<TCP:[198.18.1.2:8080->198.18.0.1:40000]>, "HTTP/1.0 200 OK"..., 145, MSG_MORE, NULL, 0 <unfinished ...>
101 1700000000.200600 write(3</dev/null>, "x", 1) = 1
202 1700000000.200900 <... sendto resumed>) = 145
101 1700000000.300000 writev(5<TCP:[198.18.0.1:40000->198.18.1.2:8080]>, [{iov_base="a", iov_len=10}, {iov_base="b", iov_len=20}], 2) = 30
101 1700000000.400000 write(6<TCP:[198.18.0.1:40001->198.18.1.2:9999]>, "x", 1) = 1
"#;

    #[test]
    fn writes_options_and_split_calls_on_the_ports_sockets() {
        let v = parse(TEXT, 8080, "198.18.0.1");
        assert_eq!(v.len(), 4, "{v:?}");
        assert!(matches!(&v[0], LogLine::Opt { opt, value: 1, side: Side::Client, .. } if opt == "NODELAY"));
        match &v[1] {
            LogLine::Write { t_ns, offset: 0, len: 120, nodelay: true, side: Side::Client, .. } => {
                assert_eq!(*t_ns, 1_700_000_000_200_000_000)
            }
            x => panic!("{x:?}"),
        }
        // The split call keeps the time it started (strace prints the entry time).
        match &v[2] {
            LogLine::Write { t_ns, len: 145, more: true, side: Side::Server, offset: 0, .. } => {
                assert_eq!(*t_ns, 1_700_000_000_200_500_000)
            }
            x => panic!("{x:?}"),
        }
        assert!(matches!(&v[3], LogLine::Write { offset: 120, len: 30, .. }));
    }
}
