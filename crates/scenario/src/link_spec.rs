//! The emulated link, as data: `rtt=20ms,rate=100mbit,mtu=1500,loss=1%,ack-loss=50%`.
//! Shared by the link emulator (which applies it to packets) and the model (which simulates it).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Queue limit of the bottleneck, drop-tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueLimit {
    Bytes(u64),
    Packets(u64),
}

/// Which direction's pure ACKs `ack-loss` / `ack-every` thin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AckDir {
    /// Pure ACKs in both directions.
    #[default]
    Both,
    /// Only client-to-server pure ACKs (the client receives the data).
    Up,
    /// Only server-to-client pure ACKs (the server receives the data): seed 003's rule, which
    /// matched the receiver's OUTPUT with `--sport 5001`, so never the sender's handshake ACK.
    Down,
}

/// The smallest MTU accepted: IPv4's minimum (RFC 791; IPV4_MIN_MTU, the TUN device's minimum).
pub const MIN_MTU: u32 = 68;
/// The largest MTU accepted: loopback's (drivers/net/loopback.c), which `simulate` models.
pub const MAX_MTU: u32 = 65536;
/// The largest MTU a TUN device takes (drivers/net/tun.c: MAX_MTU 65535), so the emulated
/// link's largest.
pub const TUN_MAX_MTU: u32 = 65535;

/// One emulated link. Delays are one-way per direction: `up` is client to server, `down` is
/// server to client. Fractions are probabilities in [0, 1].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    pub delay_up_ns: u64,
    pub delay_down_ns: u64,
    /// Uniform jitter added to each packet's delay, +- this much; packets are never reordered
    /// unless `reorder` is set.
    pub jitter_ns: u64,
    pub reorder: bool,
    /// Bottleneck rate in bits per second, each direction; None = unlimited.
    pub rate_bps: Option<u64>,
    pub queue: Option<QueueLimit>,
    /// Random loss of any packet, each direction.
    pub loss: f64,
    /// Random loss of pure ACKs only (seed 003's `-m length --length 52 ... DROP`).
    pub ack_loss: f64,
    /// Keep one pure ACK in N, the Nth of each N (seed 003's `-m statistic --mode nth --every 2
    /// --packet 0 -j DROP` drops the first of each two: linkmodel's `AckThinning`).
    pub ack_every: Option<u32>,
    /// The direction(s) `ack_loss` and `ack_every` apply to.
    #[serde(default)]
    pub ack_dir: AckDir,
    pub mtu: u32,
}

impl Default for LinkSpec {
    fn default() -> Self {
        LinkSpec {
            delay_up_ns: 0,
            delay_down_ns: 0,
            jitter_ns: 0,
            reorder: false,
            rate_bps: None,
            queue: None,
            loss: 0.0,
            ack_loss: 0.0,
            ack_every: None,
            ack_dir: AckDir::Both,
            mtu: 1500,
        }
    }
}

impl LinkSpec {
    pub fn rtt_ns(&self) -> u64 {
        self.delay_up_ns + self.delay_down_ns
    }
    /// MSS the kernel will use on this link with TCP timestamps on: MTU - 20 (IPv4) - 20 (TCP)
    /// - 12 (timestamps option, RFC 7323 3). 1500 gives 1448.
    pub fn mss_with_timestamps(&self) -> u32 {
        self.mtu.saturating_sub(52)
    }
}

/// Why a duration did not parse; the caller names the flag or key and the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("needs a unit (ns, us, ms or s)")]
    NoUnit,
    #[error("is not a duration")]
    NotANumber,
    /// Negative, or longer than the limit (in ns).
    #[error("is out of range (0 to {})", show_ns(*.0))]
    OutOfRange(u64),
}

/// `60 s`, `10 ms`, `2 us`: a limit for an error message.
fn show_ns(ns: u64) -> String {
    let (div, unit) = match ns {
        1_000_000_000.. => (1e9, "s"),
        1_000_000.. => (1e6, "ms"),
        1_000.. => (1e3, "us"),
        _ => (1.0, "ns"),
    };
    format!("{} {unit}", ns as f64 / div)
}

/// A duration with a unit (`250us`, `1.5ms`, `20ms`, `1s`: ns, us, ms or s) in nanoseconds,
/// from 0 to `max_ns`. The link SPEC's delays and jitter, and `tcpstall simulate --call-cost`.
pub fn parse_duration_ns(v: &str, max_ns: u64) -> Result<u64, DurationError> {
    let v = v.trim();
    let (num, mult) = if let Some(n) = v.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(DurationError::NoUnit);
    };
    let x: f64 = num.trim().parse().map_err(|_| DurationError::NotANumber)?;
    if !(0.0..=max_ns as f64).contains(&(x * mult)) {
        return Err(DurationError::OutOfRange(max_ns));
    }
    Ok((x * mult).round() as u64)
}

/// Longest delay or jitter a link SPEC takes.
const MAX_LINK_DELAY_NS: u64 = 60_000_000_000;

/// Why a link SPEC did not parse: one line, naming the key and the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkSpecError {
    #[error("link: the SPEC is empty (give key=value pairs, e.g. rtt=20ms)")]
    Empty,
    #[error("link: '{0}' is not key=value")]
    NotKeyValue(String),
    #[error("link: '{0}' is given twice")]
    Twice(String),
    #[error(
        "link: unknown key '{0}' (known: rtt, delay, delay-up, delay-down, jitter, reorder, rate, queue, loss, ack-loss, ack-every, ack-dir, mtu)"
    )]
    UnknownKey(String),
    #[error("link {key}: {problem}")]
    Value { key: String, problem: LinkValueError },
    #[error("link: delay sets both directions; it cannot go with {0}")]
    DelayWithOneWay(String),
    #[error(
        "link: rtt={} disagrees with the one-way delays ({} up + {} down = {}); give rtt with at most one of delay-up, delay-down",
        show_ns(*.rtt), show_ns(*.up), show_ns(*.down), show_ns(.up + .down)
    )]
    RttDisagrees { rtt: u64, up: u64, down: u64 },
    #[error("link: {name}={} is longer than rtt={}", show_ns(*.delay), show_ns(*.rtt))]
    LongerThanRtt { name: &'static str, delay: u64, rtt: u64 },
}

/// What is wrong with one key's value (the value as written is in the text).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkValueError {
    #[error("'{0}' {1}")]
    Duration(String, DurationError),
    #[error("'{0}' is not on/off")]
    NotOnOff(String),
    #[error("'{0}' is not a rate")]
    NotARate(String),
    #[error("rate '{0}' is out of range (1kbit to 1000gbit)")]
    RateRange(String),
    #[error("rate '{0}' needs a unit (kbit, mbit, gbit; kbps, mbps, gbps are bytes)")]
    RateUnit(String),
    #[error("'{0}' needs a % sign (netem reads `loss {0}` as {0} percent): write {0}%")]
    NoPercentSign(String),
    #[error("'{0}' is not a percentage (e.g. 0.5%)")]
    NotAPercentage(String),
    #[error("'{0}' is outside 0-100%")]
    PercentRange(String),
    #[error("'{0}' is not a packet count")]
    NotPackets(String),
    #[error("'{0}' is not a byte count")]
    NotBytes(String),
    #[error("a queue must hold at least one packet")]
    EmptyQueue,
    #[error("'{0}' is not a whole number")]
    NotWhole(String),
    #[error("must be at least 1")]
    Zero,
    #[error("'{0}' is not up, down or both")]
    NotAckDir(String),
    #[error(
        "{0} is outside {MIN_MTU}-{MAX_MTU} (IPv4's minimum to loopback's 65536; the emulated link's TUN devices take \
         at most {TUN_MAX_MTU})"
    )]
    Mtu(u32),
}

/// A link SPEC's delay or jitter.
fn link_duration(v: &str) -> Result<u64, LinkValueError> {
    let v = v.trim();
    parse_duration_ns(v, MAX_LINK_DELAY_NS).map_err(|e| LinkValueError::Duration(v.into(), e))
}

fn parse_rate(v: &str) -> Result<u64, LinkValueError> {
    let l = v.trim().to_ascii_lowercase();
    let units: [(&str, f64); 8] = [
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("bit", 1.0),
        ("gbps", 8e9),
        ("mbps", 8e6),
        ("kbps", 8e3),
        ("bps", 8.0),
    ];
    for (suffix, mult) in units {
        if let Some(n) = l.strip_suffix(suffix) {
            let x: f64 = n.trim().parse().map_err(|_| LinkValueError::NotARate(v.into()))?;
            let bps = x * mult;
            if !(1000.0..=1e12).contains(&bps) {
                return Err(LinkValueError::RateRange(v.into()));
            }
            return Ok(bps.round() as u64);
        }
    }
    Err(LinkValueError::RateUnit(v.into()))
}

/// A probability written as a percentage (`0.5%`). A bare number is refused: netem reads
/// `loss 0.5` as 0.5 %, so `loss=0.5` would be read as 50 % by some users and 0.5 % by others.
fn parse_percent(v: &str) -> Result<f64, LinkValueError> {
    let v = v.trim();
    let Some(p) = v.strip_suffix('%') else {
        return Err(match v.parse::<f64>() {
            Ok(_) => LinkValueError::NoPercentSign(v.into()),
            Err(_) => LinkValueError::NotAPercentage(v.into()),
        });
    };
    let x = p.trim().parse::<f64>().map_err(|_| LinkValueError::NotAPercentage(v.into()))? / 100.0;
    if !(0.0..=1.0).contains(&x) {
        return Err(LinkValueError::PercentRange(v.into()));
    }
    Ok(x)
}

/// A queue limit: packets (`100p`, `100pkts`) or bytes (`64k`, `1m`, `1500b`, `1500`).
fn parse_queue(v: &str) -> Result<QueueLimit, LinkValueError> {
    let v = v.trim();
    let q = if let Some(n) = v.strip_suffix('p').or_else(|| v.strip_suffix("pkts")) {
        QueueLimit::Packets(n.parse().map_err(|_| LinkValueError::NotPackets(v.into()))?)
    } else {
        let n = v.strip_suffix('b').unwrap_or(v);
        let (n, mult) = if let Some(k) = n.strip_suffix('k') {
            (k, 1000)
        } else if let Some(m) = n.strip_suffix('m') {
            (m, 1_000_000)
        } else {
            (n, 1)
        };
        QueueLimit::Bytes(n.parse::<u64>().map_err(|_| LinkValueError::NotBytes(v.into()))? * mult)
    };
    if matches!(q, QueueLimit::Bytes(0) | QueueLimit::Packets(0)) {
        return Err(LinkValueError::EmptyQueue);
    }
    Ok(q)
}

/// A whole number of at least 1 (`ack-every`).
fn parse_positive(v: &str) -> Result<u32, LinkValueError> {
    let n: u32 = v.trim().parse().map_err(|_| LinkValueError::NotWhole(v.into()))?;
    if n == 0 {
        return Err(LinkValueError::Zero);
    }
    Ok(n)
}

fn parse_mtu(v: &str) -> Result<u32, LinkValueError> {
    let m: u32 = v.trim().parse().map_err(|_| LinkValueError::NotWhole(v.into()))?;
    // What the kernel accepts on the devices tcpstall builds or models: IPv4
    // needs 68 (RFC 791 "Fragmentation and Reassembly"; net/ipv4 IPV4_MIN_MTU,
    // also the TUN device's minimum), a TUN device takes up to 65535
    // (drivers/net/tun.c MAX_MTU), loopback has 65536 (drivers/net/loopback.c),
    // the MTU `simulate` models loopback with. `Link::open` refuses 65536.
    if !(MIN_MTU..=MAX_MTU).contains(&m) {
        return Err(LinkValueError::Mtu(m));
    }
    Ok(m)
}

/// The delays as a SPEC gives them, before rtt and the one-way delays are reconciled.
#[derive(Default)]
struct Delays {
    rtt: Option<u64>,
    up: Option<u64>,
    down: Option<u64>,
}

impl Delays {
    /// rtt is the sum of the two one-way delays: the ones not given are derived from it (an
    /// even split when neither is given), and the ones given must fit in it.
    fn resolve(self) -> Result<(u64, u64), LinkSpecError> {
        Ok(match (self.rtt, self.up, self.down) {
            (None, u, d) => (u.unwrap_or(0), d.unwrap_or(0)),
            (Some(r), None, None) => (r / 2, r - r / 2),
            (Some(r), Some(u), Some(d)) if u + d == r => (u, d),
            (Some(rtt), Some(up), Some(down)) => return Err(LinkSpecError::RttDisagrees { rtt, up, down }),
            (Some(r), Some(u), None) if u <= r => (u, r - u),
            (Some(r), None, Some(d)) if d <= r => (r - d, d),
            (Some(rtt), u, d) => {
                let (name, one) = if u.is_some() { ("delay-up", u) } else { ("delay-down", d) };
                return Err(LinkSpecError::LongerThanRtt { name, delay: one.unwrap_or(0), rtt });
            }
        })
    }
}

impl LinkSpec {
    /// Sets key `k` from its value `v`; `Ok(false)` for a key that is not a link key.
    fn set(&mut self, k: &str, v: &str, delays: &mut Delays) -> Result<bool, LinkValueError> {
        match k {
            "rtt" => delays.rtt = Some(link_duration(v)?),
            "delay" => {
                let d = link_duration(v)?;
                delays.up = Some(d);
                delays.down = Some(d);
            }
            "delay-up" => delays.up = Some(link_duration(v)?),
            "delay-down" => delays.down = Some(link_duration(v)?),
            "jitter" => self.jitter_ns = link_duration(v)?,
            "reorder" => {
                self.reorder = match v.trim() {
                    "1" | "yes" | "on" | "true" => true,
                    "0" | "no" | "off" | "false" => false,
                    o => return Err(LinkValueError::NotOnOff(o.into())),
                }
            }
            "rate" => self.rate_bps = Some(parse_rate(v)?),
            "queue" => self.queue = Some(parse_queue(v)?),
            "loss" => self.loss = parse_percent(v)?,
            "ack-loss" => self.ack_loss = parse_percent(v)?,
            "ack-every" => self.ack_every = Some(parse_positive(v)?),
            "ack-dir" => {
                self.ack_dir = match v.trim() {
                    "both" => AckDir::Both,
                    "up" => AckDir::Up,
                    "down" => AckDir::Down,
                    o => return Err(LinkValueError::NotAckDir(o.into())),
                }
            }
            "mtu" => self.mtu = parse_mtu(v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl FromStr for LinkSpec {
    type Err = LinkSpecError;
    fn from_str(s: &str) -> Result<Self, LinkSpecError> {
        let mut l = LinkSpec::default();
        let mut delays = Delays::default();
        let parts: Vec<&str> = s.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
        if parts.is_empty() {
            return Err(LinkSpecError::Empty);
        }
        let mut seen: Vec<&str> = Vec::new();
        for part in parts {
            let (k, v) = part.split_once('=').ok_or_else(|| LinkSpecError::NotKeyValue(part.into()))?;
            let k = k.trim();
            if seen.contains(&k) {
                return Err(LinkSpecError::Twice(k.into()));
            }
            seen.push(k);
            let known = l.set(k, v, &mut delays).map_err(|problem| LinkSpecError::Value { key: k.into(), problem })?;
            if !known {
                return Err(LinkSpecError::UnknownKey(k.into()));
            }
        }
        if seen.contains(&"delay") {
            if let Some(one) = seen.iter().find(|k| matches!(**k, "delay-up" | "delay-down")) {
                return Err(LinkSpecError::DelayWithOneWay((*one).into()));
            }
        }
        (l.delay_up_ns, l.delay_down_ns) = delays.resolve()?;
        Ok(l)
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let ms = |ns: u64| format!("{}ms", ns as f64 / 1e6);
        if self.delay_up_ns == self.delay_down_ns {
            parts.push(format!("rtt={}", ms(self.rtt_ns())));
        } else {
            parts.push(format!("delay-up={},delay-down={}", ms(self.delay_up_ns), ms(self.delay_down_ns)));
        }
        if self.jitter_ns > 0 {
            parts.push(format!("jitter={}", ms(self.jitter_ns)));
        }
        if let Some(r) = self.rate_bps {
            parts.push(format!("rate={}mbit", r as f64 / 1e6));
        }
        match self.queue {
            Some(QueueLimit::Bytes(b)) => parts.push(format!("queue={b}b")),
            Some(QueueLimit::Packets(p)) => parts.push(format!("queue={p}p")),
            None => {}
        }
        if self.loss > 0.0 {
            parts.push(format!("loss={}%", self.loss * 100.0));
        }
        if self.ack_loss > 0.0 {
            parts.push(format!("ack-loss={}%", self.ack_loss * 100.0));
        }
        if let Some(n) = self.ack_every {
            parts.push(format!("ack-every={n}"));
        }
        match self.ack_dir {
            AckDir::Both => {}
            AckDir::Up => parts.push("ack-dir=up".into()),
            AckDir::Down => parts.push("ack-dir=down".into()),
        }
        parts.push(format!("mtu={}", self.mtu));
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issue_example() {
        let l: LinkSpec = "rtt=20ms,rate=100mbit,mtu=1500".parse().unwrap();
        assert_eq!(l.delay_up_ns, 10_000_000);
        assert_eq!(l.delay_down_ns, 10_000_000);
        assert_eq!(l.rate_bps, Some(100_000_000));
        assert_eq!(l.mss_with_timestamps(), 1448);
        assert_eq!(l.to_string(), "rtt=20ms,rate=100mbit,mtu=1500");
    }

    #[test]
    fn ack_thinning_and_loss() {
        let l: LinkSpec = "ack-loss=50%,loss=1%,ack-every=2,queue=100p".parse().unwrap();
        assert_eq!(l.ack_loss, 0.5);
        assert_eq!(l.loss, 0.01);
        assert_eq!(l.ack_every, Some(2));
        assert_eq!(l.queue, Some(QueueLimit::Packets(100)));
        assert_eq!(l.ack_dir, AckDir::Both);
        let l: LinkSpec = "ack-loss=50%,ack-dir=down".parse().unwrap();
        assert_eq!(l.ack_dir, AckDir::Down);
        assert_eq!(l.to_string(), "rtt=0ms,ack-loss=50%,ack-dir=down,mtu=1500");
        assert!("ack-dir=sideways".parse::<LinkSpec>().unwrap_err().to_string().contains("not up, down or both"));
    }

    #[test]
    fn durations_take_a_unit_and_a_limit() {
        assert_eq!(parse_duration_ns(" 1.5ms ", 10_000_000), Ok(1_500_000));
        assert_eq!(parse_duration_ns("2us", 10_000_000), Ok(2_000));
        assert_eq!(parse_duration_ns("0.25s", MAX_LINK_DELAY_NS), Ok(250_000_000));
        assert_eq!(parse_duration_ns("7ns", 10), Ok(7));
        assert_eq!(parse_duration_ns("5", 10_000_000), Err(DurationError::NoUnit));
        assert_eq!(parse_duration_ns("fastms", 10_000_000), Err(DurationError::NotANumber));
        assert_eq!(parse_duration_ns("11ms", 10_000_000), Err(DurationError::OutOfRange(10_000_000)));
        assert_eq!(parse_duration_ns("-1us", 10_000_000), Err(DurationError::OutOfRange(10_000_000)));
        assert_eq!(DurationError::OutOfRange(10_000_000).to_string(), "is out of range (0 to 10 ms)");
        assert_eq!(link_duration("61s").unwrap_err().to_string(), "'61s' is out of range (0 to 60 s)");
        assert_eq!(link_duration(" x ms").unwrap_err().to_string(), "'x ms' is not a duration");
    }

    #[test]
    fn mtu_range_is_the_kernels() {
        for ok in ["mtu=68", "mtu=1500", "mtu=65535", "mtu=65536"] {
            assert!(ok.parse::<LinkSpec>().is_ok(), "{ok}");
        }
        for bad in ["mtu=67", "mtu=65537", "mtu=0"] {
            let e = bad.parse::<LinkSpec>().unwrap_err().to_string();
            assert!(e.contains("outside 68-65536") && e.contains("at most 65535"), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        assert!("rtt=20".parse::<LinkSpec>().unwrap_err().to_string().contains("needs a unit"));
        assert!("rate=fast".parse::<LinkSpec>().is_err());
        assert!("loss=150%".parse::<LinkSpec>().unwrap_err().to_string().contains("outside"));
        assert!("mtu=60".parse::<LinkSpec>().is_err());
        assert!("bogus=1".parse::<LinkSpec>().unwrap_err().to_string().contains("unknown key 'bogus'"));
        assert!("rtt=20ms,delay-up=1ms,delay-down=1ms".parse::<LinkSpec>().is_err());
    }

    /// QA 9: `loss=0.5` meant 50 % here but 0.5 % to netem users (netem's `loss 0.5` is a
    /// percentage, tc-netem(8)): a bare number is refused with the spelling to use.
    #[test]
    fn loss_takes_a_percent_sign() {
        let l: LinkSpec = "loss=0.5%,ack-loss=75 %".parse().unwrap();
        assert_eq!(l.loss, 0.005);
        assert_eq!(l.ack_loss, 0.75);
        assert_eq!(
            "loss=0.5".parse::<LinkSpec>().unwrap_err().to_string(),
            "link loss: '0.5' needs a % sign (netem reads `loss 0.5` as 0.5 percent): write 0.5%"
        );
        assert!("ack-loss=1".parse::<LinkSpec>().unwrap_err().to_string().contains("write 1%"));
        assert!("loss=some%".parse::<LinkSpec>().unwrap_err().to_string().contains("is not a percentage"));
        // What Display writes parses back.
        assert_eq!(l.to_string().parse::<LinkSpec>().unwrap(), l);
    }

    /// QA 9: rtt is the sum of the one-way delays, whichever of them are given.
    #[test]
    fn rtt_and_one_way_delays_agree_or_are_refused() {
        let ms = 1_000_000;
        let d = |s: &str| s.parse::<LinkSpec>().map(|l| (l.delay_up_ns / ms, l.delay_down_ns / ms));
        assert_eq!(d("rtt=10ms"), Ok((5, 5)));
        assert_eq!(d("rtt=10ms,delay-up=1ms"), Ok((1, 9)));
        assert_eq!(d("delay-down=1ms,rtt=10ms"), Ok((9, 1)));
        assert_eq!(d("rtt=10ms,delay-up=10ms"), Ok((10, 0)));
        assert_eq!(d("rtt=10ms,delay=5ms"), Ok((5, 5)));
        assert_eq!(d("rtt=10ms,delay-up=4ms,delay-down=6ms"), Ok((4, 6)));
        assert_eq!(d("delay-up=3ms"), Ok((3, 0)));
        assert_eq!(
            d("rtt=10ms,delay-up=11ms").unwrap_err().to_string(),
            "link: delay-up=11 ms is longer than rtt=10 ms"
        );
        assert_eq!(
            d("delay=1ms,rtt=10ms").unwrap_err().to_string(),
            "link: rtt=10 ms disagrees with the one-way delays (1 ms up + 1 ms down = 2 ms); give rtt with at most one of delay-up, delay-down"
        );
        assert_eq!(
            d("delay=1ms,delay-up=2ms").unwrap_err().to_string(),
            "link: delay sets both directions; it cannot go with delay-up"
        );
    }

    /// The typed errors print the one-line texts the String errors printed.
    #[test]
    fn every_refusal_keeps_its_text() {
        let e = |s: &str| s.parse::<LinkSpec>().unwrap_err().to_string();
        assert_eq!(e("x"), "link: 'x' is not key=value");
        assert_eq!(e("queue=0p"), "link queue: a queue must hold at least one packet");
        assert_eq!(e("queue=lots"), "link queue: 'lots' is not a byte count");
        assert_eq!(e("reorder=maybe"), "link reorder: 'maybe' is not on/off");
        assert_eq!(e("rate=5"), "link rate: rate '5' needs a unit (kbit, mbit, gbit; kbps, mbps, gbps are bytes)");
        assert_eq!(e("rate=1bit"), "link rate: rate '1bit' is out of range (1kbit to 1000gbit)");
        assert_eq!(e("ack-every=0"), "link ack-every: must be at least 1");
        assert_eq!(e("ack-every= x"), "link ack-every: ' x' is not a whole number");
        assert_eq!(e("jitter=1h"), "link jitter: '1h' needs a unit (ns, us, ms or s)");
        assert_eq!(
            e("mtu=67"),
            "link mtu: 67 is outside 68-65536 (IPv4's minimum to loopback's 65536; the emulated link's TUN devices \
             take at most 65535)"
        );
        assert_eq!(
            e("speed=1"),
            "link: unknown key 'speed' (known: rtt, delay, delay-up, delay-down, jitter, reorder, rate, queue, loss, \
             ack-loss, ack-every, ack-dir, mtu)"
        );
    }

    /// QA 9: `rtt=5ms,rtt=6ms` kept the last silently; `--link ""` meant no link at all.
    #[test]
    fn repeated_keys_and_empty_specs_are_refused() {
        assert_eq!("rtt=5ms,rtt=6ms".parse::<LinkSpec>().unwrap_err().to_string(), "link: 'rtt' is given twice");
        assert_eq!("loss=1%, loss =2%".parse::<LinkSpec>().unwrap_err().to_string(), "link: 'loss' is given twice");
        for empty in ["", " ", ",", " , "] {
            assert_eq!(
                empty.parse::<LinkSpec>().unwrap_err().to_string(),
                "link: the SPEC is empty (give key=value pairs, e.g. rtt=20ms)"
            );
        }
    }
}
