//! The ranking of candidate fixes and the decision among them: stalls removed first, then p99,
//! and among the candidates that tie on both, the smallest change by a written rule.
//!
//! - Stalls: a candidate's stall rate (stalls per measured round) puts it in a tier: none, rare
//!   (at most 2% of rounds: what a scheduling hiccup or one late timer makes), or stalling
//!   (ordered by rate). A fix that removes the stalls always ranks above one that does not.
//! - p99: within a tier, the candidate with the lowest p99 and every candidate whose 95%
//!   interval overlaps its interval, or whose p99 is within [`P99_TIE_US`] or [`P99_TIE_RATIO`]
//!   of it, **tie** (a loopback p99 of a hundred rounds moves by hundreds of microseconds from
//!   run to run on a shared machine; what advise ranks is whether the tens of milliseconds are
//!   gone). The first such group is the declared tie of the decision.
//! - Among tied candidates, the smallest change first, by [`RULES`] in order: a change the
//!   program can make before one it cannot (gathering writes the capture shows are separate
//!   replies: [`Scored::impractical`]); no busy-poll unless it alone removes the wait; fewest sides changed (as written, then one side, then
//!   both); a gathered write (writev, one buffer) before a socket option or send flag; a
//!   portable change before a Linux/FreeBSD-only one (MSG_MORE) before a Linux-only one
//!   (TCP_CORK, TCP_QUICKACK, busy-poll); then less CPU per round (buckets of 1.5x: noise
//!   between runs does not reorder), fewer segments on the wire (buckets of 5%), the code
//!   change's size, the p99 estimate and the label, so the order is total and the same input
//!   always gives the same order.
//! - A change the program cannot make is never first: like busy-poll below, it never ranks
//!   above a practical candidate of the same stall tier, even with a lower p99.
//! - busy-poll saves the reader's wake-up, never a TCP stall, and burns a CPU while it waits:
//!   a busy-poll candidate never ranks above a candidate without it in the same stall tier,
//!   even with a lower p99. It can come first only when it alone removes the wait.
//!
//! The group is emitted and the rest of the tier ranked the same way.

use scenario::Opt;
use serde::Serialize;

use crate::stats::Interval;

/// p99s closer than this (us) are equal for the ranking: the p99 of a hundred loopback rounds
/// on a shared machine moves by hundreds of microseconds from run to run (seed 001's writev
/// measured 77, 346 and 357 us in three runs), so a narrower margin let that noise pick the
/// recommendation (nodelay, writev or msg-more in turn); what advise ranks is whether the tens of
/// milliseconds are gone.
pub const P99_TIE_US: f64 = 1000.0;
/// p99s within this factor of each other are equal for the ranking.
pub const P99_TIE_RATIO: f64 = 1.25;
/// CPU per round within this factor (one logarithmic bucket) is equal for the ranking.
pub const CPU_BUCKET_RATIO: f64 = 1.5;

fn p99_tied(a: &Scored, b: &Scored) -> bool {
    let (lo, hi) = if a.p99.est <= b.p99.est { (a.p99.est, b.p99.est) } else { (b.p99.est, a.p99.est) };
    a.p99.overlaps(&b.p99) || hi - lo <= P99_TIE_US || hi <= lo * P99_TIE_RATIO
}

/// A stall rate up to this is rare: one slow round in 50 is what a scheduling hiccup makes on
/// a busy host (the lab's slow samples cannot tell it from TCP).
pub const RARE: f64 = 0.02;

/// What the ranking needs of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scored {
    pub label: String,
    /// The strategies on each side (empty: as written).
    pub client: Vec<Opt>,
    pub server: Vec<Opt>,
    pub stalls: u64,
    pub rounds: u64,
    pub p99: Interval,
    /// Segments both sides sent per measured round (data and pure ACKs).
    pub segs_per_round: f64,
    pub bytes_per_round: f64,
    /// Both sides' CPU per round (us), when measured (the lab).
    pub cpu_us_per_round: Option<f64>,
    /// The size of the code change (crate::code::change_size); 0 for the workload as written.
    pub change: u32,
    /// A change the program cannot make: gathering into one write the writes a capture shows
    /// are separate replies (scenario::derive::separate_replies).
    pub impractical: bool,
}

impl Scored {
    pub fn stall_rate(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            self.stalls as f64 / self.rounds as f64
        }
    }
    /// 0 = no stall, 1 = rare (at most 2% of rounds), 2 = stalls.
    pub fn tier(&self) -> u8 {
        let r = self.stall_rate();
        if self.stalls == 0 {
            0
        } else if r <= RARE {
            1
        } else {
            2
        }
    }
    fn opts(&self) -> impl Iterator<Item = Opt> + '_ {
        self.client.iter().chain(&self.server).copied()
    }
    /// A reader spins (busy-poll) on either side.
    pub fn busy_poll(&self) -> bool {
        self.opts().any(|o| o == Opt::BusyPoll)
    }
    /// Sides changed: 0 (as written), 1 or 2.
    pub fn sides(&self) -> u8 {
        u8::from(!self.client.is_empty()) + u8::from(!self.server.is_empty())
    }
    /// 0: no change or only gathered writes; 1: a socket option or a send flag.
    pub fn kind(&self) -> u8 {
        self.opts().map(kind).max().unwrap_or(0)
    }
    /// The least portable of the change's parts (see [`portability`]).
    pub fn portability(&self) -> u8 {
        self.opts().map(portability).max().unwrap_or(0)
    }
}

/// 0 for a gathered write (writev/sendmsg, or one buffer and one send), 1 for a socket option or
/// a send flag.
pub fn kind(o: Opt) -> u8 {
    match o {
        Opt::Writev | Opt::Buffer => 0,
        Opt::Nodelay
        | Opt::QuickackOnce
        | Opt::QuickackEach
        | Opt::Cork
        | Opt::MsgMore
        | Opt::NodelayThenCork
        | Opt::BusyPoll => 1,
    }
}

/// 0: portable (POSIX writev, TCP_NODELAY); 1: Linux and FreeBSD only (MSG_MORE, send(2));
/// 2: Linux only (TCP_CORK, TCP_QUICKACK: tcp(7); SO_BUSY_POLL: socket(7)).
pub fn portability(o: Opt) -> u8 {
    match o {
        Opt::Writev | Opt::Buffer | Opt::Nodelay => 0,
        Opt::MsgMore => 1,
        Opt::Cork | Opt::QuickackOnce | Opt::QuickackEach | Opt::NodelayThenCork | Opt::BusyPoll => 2,
    }
}

/// The rules that order tied candidates, most significant first (JSON: kebab-case names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// No other candidate ties with the chosen one.
    Alone,
    /// A change the program can make before one it cannot.
    Practical,
    /// A busy-poll candidate only when it alone removes the wait.
    NoBusyPoll,
    /// As written, then one side, then both.
    FewestSides,
    /// A gathered write before a socket option or send flag.
    GatheredWrite,
    /// Portable, then Linux/FreeBSD-only, then Linux-only.
    Portable,
    /// Less CPU per round (buckets of 1.5x).
    Cpu,
    /// Fewer segments per round (buckets of 5%), then fewer bytes.
    Segments,
    /// The smaller code change (crate::code::change_size).
    ChangeSize,
    /// The lower p99 estimate.
    P99,
    /// The label, alphabetically (nothing else told them apart).
    Name,
}

/// The ordered rules, as documented.
pub const RULES: [Rule; 10] = [
    Rule::Practical,
    Rule::NoBusyPoll,
    Rule::FewestSides,
    Rule::GatheredWrite,
    Rule::Portable,
    Rule::Cpu,
    Rule::Segments,
    Rule::ChangeSize,
    Rule::P99,
    Rule::Name,
];

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Alone => "alone",
            Rule::Practical => "practical",
            Rule::NoBusyPoll => "no-busy-poll",
            Rule::FewestSides => "fewest-sides",
            Rule::GatheredWrite => "gathered-write",
            Rule::Portable => "portable",
            Rule::Cpu => "cpu",
            Rule::Segments => "segments",
            Rule::ChangeSize => "change-size",
            Rule::P99 => "p99",
            Rule::Name => "name",
        }
    }
}

/// A cost on a logarithmic scale of `ratio`: costs within about that factor fall in the same
/// bucket; a bucket is a total order, unlike "within 5%".
fn bucket(cost: f64, ratio: f64) -> i64 {
    if cost <= 0.0 {
        return i64::MIN;
    }
    (cost.ln() / ratio.ln()).round() as i64
}

/// Which rule orders `a` before or after `b` (the first that tells them apart), with the order.
fn compare(a: &Scored, b: &Scored) -> (std::cmp::Ordering, Rule) {
    use std::cmp::Ordering::Equal;
    let cpu = |s: &Scored| s.cpu_us_per_round.map_or(i64::MIN, |c| bucket(c, CPU_BUCKET_RATIO));
    for rule in RULES {
        let o = match rule {
            Rule::Practical => a.impractical.cmp(&b.impractical),
            Rule::NoBusyPoll => a.busy_poll().cmp(&b.busy_poll()),
            Rule::FewestSides => a.sides().cmp(&b.sides()),
            Rule::GatheredWrite => a.kind().cmp(&b.kind()),
            Rule::Portable => a.portability().cmp(&b.portability()),
            Rule::Cpu => cpu(a).cmp(&cpu(b)),
            Rule::Segments => bucket(a.segs_per_round, 1.05)
                .cmp(&bucket(b.segs_per_round, 1.05))
                .then(bucket(a.bytes_per_round, 1.05).cmp(&bucket(b.bytes_per_round, 1.05))),
            Rule::ChangeSize => a.change.cmp(&b.change),
            Rule::P99 => a.p99.est.total_cmp(&b.p99.est),
            Rule::Name | Rule::Alone => a.label.cmp(&b.label),
        };
        if o != Equal {
            return (o, rule);
        }
    }
    (Equal, Rule::Name)
}

/// The ranking and what decided its first place.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Indices of the candidates, best first.
    pub order: Vec<usize>,
    /// The declared tie: the candidates equal to the first on stalls and p99, in rank order
    /// (the chosen one first). One element when nothing ties.
    pub tie: Vec<usize>,
    /// The rule that put the chosen candidate before the next one in the tie.
    pub rule: Rule,
}

impl Decision {
    pub fn chosen(&self) -> Option<usize> {
        self.order.first().copied()
    }

    /// One sentence: who ties and why the chosen one is first.
    pub fn reason(&self, c: &[Scored]) -> String {
        let Some(first) = self.chosen() else { return String::new() };
        let best = &c[first];
        let standing = match best.tier() {
            0 => "no stalls",
            1 => "rare stalls",
            _ => "the fewest stalls",
        };
        if self.tie.len() < 2 {
            return format!(
                "{} ranks first alone: {standing}, and no other candidate with as few stalls has a p99 within its \
                 95% interval.",
                best.label
            );
        }
        let names: Vec<&str> = self.tie.iter().map(|&i| c[i].label.as_str()).collect();
        // The whole tie is in the table (marked) and the JSON; the sentence names up to four.
        let list = match names.as_slice() {
            [a, b] => format!("{a} and {b}"),
            [rest @ .., last] if names.len() <= 4 => format!("{} and {last}", rest.join(", ")),
            [first @ .., _] => format!("{} and {} more", first[..3].join(", "), names.len() - 3),
            [] => String::new(),
        };
        let why = match self.rule {
            Rule::Practical => "the program can make it (the capture shows the writes the other gathers are \
                                separate replies)"
                .to_string(),
            Rule::NoBusyPoll => "it does not spin a CPU (busy-poll saves a wake-up, never a stall, so it is chosen \
                                 only when it alone removes the wait)"
                .to_string(),
            Rule::FewestSides if best.sides() == 0 => "it changes no code".to_string(),
            Rule::FewestSides => "it changes one side, not both".to_string(),
            Rule::GatheredWrite => "a gathered write is the smallest portable change, before any socket option".into(),
            Rule::Portable if best.portability() == 0 => "it is the smallest portable change".to_string(),
            Rule::Portable => "it is the most portable change".to_string(),
            Rule::Cpu => "it costs the least CPU per round".to_string(),
            Rule::Segments => "it sends the fewest segments".to_string(),
            Rule::ChangeSize => "it is the smallest code change".to_string(),
            Rule::P99 => "its p99 is the lowest, all else equal".to_string(),
            Rule::Name | Rule::Alone => "nothing measured tells them apart (first by name)".to_string(),
        };
        format!(
            "{list} tie ({standing}, p99s within each other's 95% intervals); {} is first by rule {}: {why}.",
            best.label,
            self.rule.as_str()
        )
    }
}

/// Indices of `c` best first.
pub fn rank(c: &[Scored]) -> Vec<usize> {
    decide(c).order
}

/// The ranking, the declared tie at its top, and the rule that chose within the tie.
pub fn decide(c: &[Scored]) -> Decision {
    let mut left: Vec<usize> = (0..c.len()).collect();
    // Tier, then (in the stalling tier) the stall rate.
    left.sort_by(|&a, &b| {
        c[a].tier().cmp(&c[b].tier()).then_with(|| {
            if c[a].tier() == 2 {
                c[a].stall_rate().total_cmp(&c[b].stall_rate())
            } else {
                std::cmp::Ordering::Equal
            }
        })
    });
    let mut out = Vec::with_capacity(c.len());
    let mut tie: Option<Vec<usize>> = None;
    while let Some(&first) = left.first() {
        // The block of equal stall standing.
        let same = |i: usize| {
            c[i].tier() == c[first].tier() && (c[i].tier() != 2 || c[i].stall_rate() == c[first].stall_rate())
        };
        let mut block: Vec<usize> = left.iter().copied().take_while(|&i| same(i)).collect();
        left.drain(..block.len());
        while !block.is_empty() {
            // The anchor: the lowest p99 without busy-poll and practical when there is one
            // (neither busy-poll nor a change the program cannot make outranks a plain candidate
            // in the same tier), else the lowest p99.
            let plain = |i: usize| !c[i].busy_poll() && !c[i].impractical;
            let lowest = |only_plain: bool| {
                block
                    .iter()
                    .copied()
                    .filter(|&i| !only_plain || plain(i))
                    .min_by(|&a, &b| c[a].p99.est.total_cmp(&c[b].p99.est).then(c[a].label.cmp(&c[b].label)))
            };
            let anchor = lowest(true).or_else(|| lowest(false)).expect("not empty");
            let (mut group, rest): (Vec<usize>, Vec<usize>) = block
                .iter()
                .partition(|&&i| p99_tied(&c[i], &c[anchor]) || (!plain(i) && c[i].p99.est < c[anchor].p99.est));
            group.sort_by(|&a, &b| compare(&c[a], &c[b]).0);
            if tie.is_none() {
                tie = Some(group.clone());
            }
            out.extend(group);
            block = rest;
        }
    }
    let tie = tie.unwrap_or_default();
    let rule = match tie.as_slice() {
        [a, b, ..] => compare(&c[*a], &c[*b]).1,
        _ => Rule::Alone,
    };
    Decision { order: out, tie, rule }
}

#[cfg(test)]
mod tests;
