//! `tcpstall sockets`: this network namespace's TCP sockets (/proc/net/tcp, tcp6), each with
//! its owner (/proc/PID/fd) and its options read through a duplicate of the owner's descriptor
//! (crates/sys peersock: pidfd_getfd + getsockopt), twice, `--interval` apart; the rules of
//! crates/watch `sockets` say which are at risk.

use report::owner::OwnerFilter;
use report::sockets::{SocketOptions, SocketRow, SocketsDoc};

use crate::cli::procsock::{proc_owner, socket_holders, tcp_sockets};
use crate::flags::sockets::{check, SocketsArgs, SocketsFormat};

/// What this kernel, or this build, does not give (said in every output).
const NOT_AVAILABLE: [&str; 2] = [
    "the exact Nagle test (tp->snd_sml, Minshall's check) and how long a cork has been held: no getsockopt or \
     tcp_info field holds them; a BPF iterator over TCP sockets (iter/tcp) could read them, and this kernel \
     loads one, but tcpstall's eBPF loader (aya 0.13) cannot load iterator programs: small_in_flight is \
     inferred from unacknowledged bytes, a held cork from two readings",
    "sockets no process holds a descriptor of (orphans closing, kernel sockets): listed without options",
];

fn options(p: &::sys::peersock::PeerSocket) -> SocketOptions {
    let i = &p.info;
    let unacked_bytes = match (i.bytes_sent, i.bytes_retrans, i.bytes_acked) {
        (Some(s), Some(r), Some(a)) => Some(s.saturating_sub(r).saturating_sub(a)),
        _ => None,
    };
    let mss = i.snd_mss.max(1);
    SocketOptions {
        nodelay: p.nodelay,
        cork: p.cork,
        pingpong: p.pingpong,
        ato_us: i.ato,
        mss: i.snd_mss,
        cwnd: i.snd_cwnd,
        unacked_segments: i.unacked,
        unacked_bytes,
        small_in_flight: unacked_bytes.is_some_and(|b| b > 0 && b % u64::from(mss) != 0),
        notsent_lowat: p.notsent_lowat,
        notsent_bytes: i.notsent_bytes.unwrap_or(0),
        congestion: p.congestion.clone(),
        data_segs_in: i.data_segs_in.unwrap_or(0),
        data_segs_out: i.data_segs_out.unwrap_or(0),
    }
}

/// One reading: per socket (by local, remote), its row without risks.
fn read_all(a: &SocketsArgs, owners: &OwnerFilter) -> Vec<SocketRow> {
    let holders = socket_holders();
    let mut rows = Vec::new();
    for s in tcp_sockets() {
        if s.state == 10 && !a.listening {
            continue;
        }
        if !a.ports.is_empty() && !a.ports.iter().any(|p| *p == s.local.port() || *p == s.remote.port()) {
            continue;
        }
        let held: Vec<(u32, i32)> = holders.get(&s.inode).cloned().unwrap_or_default();
        let owner = proc_owner(&held.iter().map(|h| h.0).collect::<Vec<_>>());
        if !owners.is_empty() && !owner.as_ref().is_some_and(|o| o.matches(owners)) {
            continue;
        }
        let read = match held.first() {
            Some(&(pid, fd)) => {
                ::sys::peersock::read_peer(pid, fd).map_err(|e| format!("pidfd_getfd({pid}, {fd}): {e}"))
            }
            None => Err("no process holds it".to_string()),
        };
        let (options, unreadable) = match read {
            Ok(p) => (Some(options(&p)), None),
            Err(e) => (None, Some(e)),
        };
        rows.push(SocketRow {
            local: s.local,
            remote: s.remote,
            state: kevidence::tcp_state_name(s.state),
            owner,
            options,
            unreadable,
            risks: Vec::new(),
        });
    }
    rows
}

pub(crate) fn run(a: crate::flags::sockets::SocketsArgs) -> anyhow::Result<i32> {
    check(&a)?;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("tcpstall sockets: not root: only this user's processes' sockets can be read (pidfd_getfd needs ptrace rights)");
    }
    let filter = OwnerFilter { pids: a.pids.clone(), comms: Vec::new(), cgroups: a.cgroups.clone() };
    let first = read_all(&a, &filter);
    let between_ns = (a.interval * 1e9) as u64;
    std::thread::sleep(std::time::Duration::from_nanos(between_ns));
    let mut rows = read_all(&a, &filter);
    for r in &mut rows {
        let before = first.iter().find(|f| f.local == r.local && f.remote == r.remote).and_then(|f| f.options.as_ref());
        if let Some(now) = &r.options {
            r.risks = ::watch::sockets::risks(now, before, between_ns);
        }
    }
    if a.at_risk {
        rows.retain(|r| !r.risks.is_empty());
    }
    rows.sort_by_key(|r| (r.local, r.remote));
    let doc = SocketsDoc {
        schema_version: report::SCHEMA_VERSION,
        method: "/proc/net/tcp{,6} and /proc/PID/fd for the owners; pidfd_getfd(2) then getsockopt(2) \
                 (TCP_NODELAY, TCP_CORK, TCP_QUICKACK, TCP_NOTSENT_LOWAT, TCP_CONGESTION, TCP_INFO) for the state"
            .into(),
        not_available: NOT_AVAILABLE.iter().map(|s| s.to_string()).collect(),
        sockets: rows,
    };
    match a.format {
        SocketsFormat::Json => println!("{}", doc.to_json()?),
        SocketsFormat::Table => print!("{}", doc.text()),
    }
    Ok(0)
}
