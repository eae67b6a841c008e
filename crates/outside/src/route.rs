//! `quickack 1` on the route a side uses: the route's RTAX_QUICKACK metric, which
//! net/ipv4/tcp_input.c tcp_in_quickack_mode() honours (`dst_metric(dst, RTAX_QUICKACK)`): the
//! receiver ACKs every segment at once and never delays an ACK (the receiving side's fix for
//! Nagle x delayed ACK; RFC 1122 4.2.3.2 allows the delay, nothing requires it). Set with
//! `ip route change <the route as it is> quickack 1`, undone with `ip route change <the route
//! as it was>`: a change replaces the route's metrics whole (net/ipv4/fib_trie.c
//! fib_table_insert with NLM_F_REPLACE), so the old line puts back exactly what was there.
//!
//! Which route: the one the kernel picks for the peer's address, among the `local` and `main`
//! tables in that order (the default policy rules, `ip rule`), longest prefix first. On loopback
//! that is the local table's `local 127.0.0.0/8 dev lo` route; in the lab's namespaces the
//! veth's subnet route. Parsing and picking are pure ([`pick`]).

use std::net::Ipv4Addr;

use crate::{tool, FixError};

/// One route line of `ip -4 route show table all`, as words, with what picking needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The line's words, as `ip` printed them (`ip route change` takes them back in any order).
    pub words: Vec<String>,
    /// "local", "main", or another table's name.
    pub table: String,
    /// "unicast" unless the line starts with a type (local, broadcast...).
    pub kind: String,
    pub net: Ipv4Addr,
    pub prefix_len: u8,
}

impl Route {
    /// The destination as `ip` writes it (`default`, `a.b.c.d/n`).
    pub fn destination(&self) -> String {
        if self.prefix_len == 0 {
            "default".into()
        } else {
            format!("{}/{}", self.net, self.prefix_len)
        }
    }

    /// Whether it carries `quickack 1` already.
    pub fn has_quickack(&self) -> bool {
        self.words.windows(2).any(|w| w[0] == "quickack" && w[1] == "1")
    }

    fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix_len == 0 { 0 } else { u32::MAX << (32 - u32::from(self.prefix_len)) };
        u32::from(ip) & mask == u32::from(self.net) & mask
    }

    /// The line with `quickack 1`, for `ip route change` (one metric replaced if present).
    pub fn with_quickack(&self) -> Vec<String> {
        let mut w = self.words.clone();
        if let Some(i) = w.iter().position(|x| x == "quickack") {
            w.drain(i..(i + 2).min(w.len()));
        }
        w.extend(["quickack".into(), "1".into()]);
        w
    }

    /// The command that sets it, as a user types it.
    pub fn change_command(&self, netns: Option<&str>) -> String {
        let ns = netns.map(|n| format!("-n {n} ")).unwrap_or_default();
        format!("ip {ns}route change {}", self.with_quickack().join(" "))
    }
}

/// Parse one line of `ip -4 route show table all` (None for lines that are not IPv4 routes).
/// Pure.
pub fn parse(line: &str) -> Option<Route> {
    let words: Vec<String> = line.split_whitespace().map(String::from).collect();
    let types = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "anycast",
        "unreachable",
        "blackhole",
        "prohibit",
        "throw",
        "nat",
    ];
    let (kind, dst) = match words.first()? {
        t if types.contains(&t.as_str()) => (t.clone(), words.get(1)?.clone()),
        d => ("unicast".to_string(), d.clone()),
    };
    let (net, prefix_len) = match dst.as_str() {
        "default" => (Ipv4Addr::UNSPECIFIED, 0),
        d => match d.split_once('/') {
            Some((a, n)) => (a.parse().ok()?, n.parse().ok().filter(|n| *n <= 32)?),
            None => (d.parse().ok()?, 32),
        },
    };
    let table = words.windows(2).find(|w| w[0] == "table").map_or("main".to_string(), |w| w[1].clone());
    Some(Route { words, table, kind, net, prefix_len })
}

/// The route the kernel uses to reach `dst`: the local table first (a `local` route there),
/// then main, longest prefix (the default policy rules: local, main, default). Pure.
pub fn pick(routes: &[Route], dst: Ipv4Addr) -> Option<Route> {
    let best = |table: &str, kinds: &[&str]| {
        routes
            .iter()
            .filter(|r| r.table == table && kinds.contains(&r.kind.as_str()) && r.contains(dst))
            .max_by_key(|r| r.prefix_len)
            .cloned()
    };
    best("local", &["local"]).or_else(|| best("main", &["unicast", "local"]))
}

/// `ip`, run in `netns` (a name or a namespace file's path: [`crate::in_netns`]).
fn ip_args(netns: Option<&str>) -> Vec<String> {
    match netns {
        Some(n) if n.starts_with('/') => {
            let mut v = crate::in_netns(n);
            v.push("ip".into());
            v
        }
        Some(n) => ["ip", "-n", n].map(String::from).to_vec(),
        None => vec!["ip".into()],
    }
}

fn run_ip(netns: Option<&str>, args: &[&str]) -> Result<String, FixError> {
    let mut a = ip_args(netns);
    a.extend(args.iter().map(|s| s.to_string()));
    tool(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The route to `dst` in `netns` (None: this namespace), as the kernel has it now.
pub fn lookup(netns: Option<&str>, dst: Ipv4Addr) -> Result<Route, FixError> {
    let out = run_ip(netns, &["-4", "route", "show", "table", "all"])?;
    let routes: Vec<Route> = out.lines().filter_map(parse).collect();
    pick(&routes, dst)
        .ok_or_else(|| FixError::Unavailable(format!("no route to {dst} in {}", netns.unwrap_or("this namespace"))))
}

/// `quickack 1` on a route, undone on drop (the route put back as it was).
#[derive(Debug)]
pub struct Quickack {
    netns: Option<String>,
    before: Route,
    /// The command that set it, as a user types it.
    pub command: String,
}

impl Quickack {
    /// Set `quickack 1` on the route `netns` uses to reach `dst`.
    pub fn apply(netns: Option<&str>, dst: Ipv4Addr) -> Result<Quickack, FixError> {
        let before = lookup(netns, dst)?;
        let mut a = vec!["route", "change"];
        let with = before.with_quickack();
        a.extend(with.iter().map(String::as_str));
        run_ip(netns, &a)?;
        let command = before.change_command(netns);
        let q = Quickack { netns: netns.map(String::from), before, command };
        // Read back: the metric is on the route now.
        let now = lookup(netns, dst)?;
        if !now.has_quickack() {
            return Err(FixError::Unavailable(format!(
                "`{}` did not set the metric: {}",
                q.command,
                now.words.join(" ")
            )));
        }
        Ok(q)
    }

    pub fn route(&self) -> &Route {
        &self.before
    }

    /// Put the route back as it was.
    pub fn undo(&self) -> Result<(), FixError> {
        let mut a = vec!["route", "change"];
        a.extend(self.before.words.iter().map(String::as_str));
        run_ip(self.netns.as_deref(), &a).map(|_| ())
    }
}

impl Drop for Quickack {
    fn drop(&mut self) {
        let _ = self.undo();
    }
}

/// The systemd-networkd form of `quickack 1` on a route (systemd.network(5) [Route] QuickAck=).
pub fn networkd_stanza(route: &Route) -> String {
    let mut s = format!("[Route]\nDestination={}\n", route.destination());
    if route.table != "main" {
        s += &format!("Table={}\n", route.table);
    }
    if route.kind != "unicast" {
        s += &format!("Type={}\n", route.kind);
    }
    s + "QuickAck=yes\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW: &str = "default via 10.0.0.1 dev eth0 proto dhcp src 10.0.0.5 metric 100\n\
10.0.0.0/24 dev eth0 proto kernel scope link src 10.0.0.5\n\
10.203.0.0/24 dev tsv1t proto kernel scope link src 10.203.0.1\n\
local 10.0.0.5 dev eth0 table local proto kernel scope host src 10.0.0.5\n\
broadcast 10.0.0.255 dev eth0 table local proto kernel scope link src 10.0.0.5\n\
local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1\n\
local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1\n";

    fn routes() -> Vec<Route> {
        SHOW.lines().filter_map(parse).collect()
    }

    #[test]
    fn loopback_uses_the_local_tables_route() {
        let r = pick(&routes(), "127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(r.words.join(" "), "local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1");
        let r = pick(&routes(), "127.0.0.2".parse().unwrap()).unwrap();
        assert_eq!(r.destination(), "127.0.0.0/8");
        assert_eq!(r.table, "local");
    }

    #[test]
    fn a_peer_uses_the_longest_main_prefix() {
        let r = pick(&routes(), "10.203.0.2".parse().unwrap()).unwrap();
        assert_eq!(r.destination(), "10.203.0.0/24");
        assert_eq!(
            r.change_command(Some("ns1")),
            "ip -n ns1 route change 10.203.0.0/24 dev tsv1t proto kernel scope link src 10.203.0.1 quickack 1"
        );
        let r = pick(&routes(), "192.0.2.9".parse().unwrap()).unwrap();
        assert_eq!(r.destination(), "default");
    }

    #[test]
    fn quickack_replaces_an_existing_metric_and_is_seen() {
        let r = parse("10.1.0.0/16 dev x quickack 0 mtu 1400").unwrap();
        assert!(!r.has_quickack());
        assert_eq!(r.with_quickack().join(" "), "10.1.0.0/16 dev x mtu 1400 quickack 1");
        assert!(parse("10.1.0.0/16 dev x quickack 1").unwrap().has_quickack());
    }

    #[test]
    fn networkd_stanza_names_the_table_and_type_when_not_main() {
        let r = pick(&routes(), "127.0.0.2".parse().unwrap()).unwrap();
        assert_eq!(networkd_stanza(&r), "[Route]\nDestination=127.0.0.0/8\nTable=local\nType=local\nQuickAck=yes\n");
        let r = pick(&routes(), "10.203.0.2".parse().unwrap()).unwrap();
        assert_eq!(networkd_stanza(&r), "[Route]\nDestination=10.203.0.0/24\nQuickAck=yes\n");
    }

    #[test]
    fn ignores_lines_that_are_not_routes() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("nexthop via 10.0.0.1"), None);
        assert_eq!(parse("10.0.0.0/40 dev x"), None);
    }
}
