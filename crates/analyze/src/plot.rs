//! Time-sequence diagrams as SVG (pure: returns the document as a string).
//!
//! One panel per direction of a flow: relative sequence number against time, a vertical tick per
//! data segment (seq .. seq+len), the peer's cumulative ACK as a step line, stalls shaded and
//! labelled with their cause. Points are capped per flow so a huge capture still yields a small
//! file; the cap is stated in the figure when it was hit.

use crate::{FlowAnalysis, Stall};
use std::fmt::Write;
use trace::{Endpoint, Event, EventKind, Instant};

/// Points kept per direction of a flow.
pub const MAX_POINTS: usize = 20_000;

/// Collects what a plot needs from a flow's events (bounded memory).
#[derive(Debug, Default, Clone)]
pub struct PlotCollector {
    isn: [Option<u32>; 2],
    /// (t, rel seq start, rel seq end) per direction.
    data: [Vec<(u64, u64, u64)>; 2],
    /// (t, rel ack) of the peer's ACKs for each direction's data.
    acks: [Vec<(u64, u64)>; 2],
    pub truncated: bool,
}

impl PlotCollector {
    pub fn push(&mut self, ev: &Event) {
        let EventKind::Segment(s) = &ev.kind else { return };
        let d = ev.from.index();
        if s.flags.syn() || self.isn[d].is_none() {
            self.isn[d] = Some(if s.flags.syn() { s.seq.wrapping_add(1) } else { s.seq });
        }
        let t = ev.t.as_nanos();
        if s.len > 0 {
            if self.data[d].len() < MAX_POINTS {
                let rel = u64::from(s.seq.wrapping_sub(self.isn[d].unwrap_or(s.seq)));
                self.data[d].push((t, rel, rel + u64::from(s.len)));
            } else {
                self.truncated = true;
            }
        }
        let p = ev.from.peer().index();
        if s.flags.ack() {
            if let Some(isn) = self.isn[p] {
                let rel = u64::from(s.ack.wrapping_sub(isn));
                if rel < 1 << 31 {
                    if self.acks[p].len() < MAX_POINTS {
                        self.acks[p].push((t, rel));
                    } else {
                        self.truncated = true;
                    }
                }
            }
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Renders one SVG with a panel per (flow, direction) that carried data.
pub fn render_svg(flows: &[(String, &FlowAnalysis, &PlotCollector)]) -> String {
    const W: f64 = 960.0;
    const PH: f64 = 260.0;
    const ML: f64 = 80.0;
    const MR: f64 = 20.0;
    const MT: f64 = 50.0;
    let mut panels = Vec::new();
    for (label, fa, pc) in flows {
        for d in [Endpoint::A, Endpoint::B] {
            if !pc.data[d.index()].is_empty() {
                panels.push((label.as_str(), *fa, *pc, d));
            }
        }
    }
    let height = MT + panels.len().max(1) as f64 * (PH + 50.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{ML}" y="20" font-size="14">tcpstall explain: time-sequence per flow and direction (ticks: data, line: ACK, shaded: stalls)</text>"#
    );
    // Legend.
    let legend = [
        ("#b2182b", "data segment"),
        ("#2166ac", "peer's ACK"),
        ("#f4a582", "nagle-delayed-ack"),
        ("#92c5de", "other TCP cause"),
        ("#cccccc", "application"),
    ];
    for (i, (color, what)) in legend.iter().enumerate() {
        let lx = ML + i as f64 * 160.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="28" width="12" height="10" fill="{color}"/><text x="{}" y="37">{what}</text>"#,
            lx + 16.0
        );
    }
    if panels.is_empty() {
        let _ = writeln!(s, r#"<text x="{ML}" y="60">no data segments</text>"#);
    }
    for (i, (label, fa, pc, d)) in panels.iter().enumerate() {
        let top = MT + i as f64 * (PH + 50.0) + 20.0;
        let data = &pc.data[d.index()];
        let acks = &pc.acks[d.index()];
        let t0 = fa.first.as_nanos();
        let t1 = fa.last.as_nanos().max(t0 + 1);
        let smax = data.iter().map(|x| x.2).max().unwrap_or(1).max(1);
        let x = |t: u64| ML + (t.saturating_sub(t0)) as f64 / (t1 - t0) as f64 * (W - ML - MR);
        let y = |q: u64| top + PH - (q.min(smax) as f64 / smax as f64) * PH;
        let _ = writeln!(
            s,
            r#"<text x="{ML}" y="{}" font-size="12">{} — data sent by {:?}</text>"#,
            top - 6.0,
            esc(label),
            d
        );
        let _ = writeln!(
            s,
            r##"<rect x="{ML}" y="{top}" width="{}" height="{PH}" fill="none" stroke="#888"/>"##,
            W - ML - MR
        );
        for st in fa.stalls.iter().filter(|st: &&Stall| st.held == *d) {
            let (xa, xb) = (x(st.start.as_nanos()), x((st.start + st.length).as_nanos()));
            let color = match st.cause {
                trace::Cause::NagleDelayedAck => "#f4a582",
                trace::Cause::Application => "#cccccc",
                _ => "#92c5de",
            };
            let _ = writeln!(
                s,
                r#"<rect x="{xa:.1}" y="{top}" width="{:.1}" height="{PH}" fill="{color}" opacity="0.6"><title>{} {} at {} s</title></rect>"#,
                (xb - xa).max(1.0),
                st.cause,
                st.length,
                st.start
            );
        }
        // ACK step line.
        if !acks.is_empty() {
            let mut path = String::new();
            let mut prev: Option<f64> = None;
            for &(t, a) in acks.iter() {
                let (px, py) = (x(t), y(a));
                match prev {
                    None => {
                        let _ = write!(path, "M{px:.1},{py:.1}");
                    }
                    Some(ly) => {
                        let _ = write!(path, " L{px:.1},{ly:.1} L{px:.1},{py:.1}");
                    }
                }
                prev = Some(py);
            }
            let _ = writeln!(s, r##"<path d="{path}" fill="none" stroke="#2166ac" stroke-width="1"/>"##);
        }
        let mut ticks = String::new();
        for &(t, a, b) in data.iter() {
            let px = x(t);
            let _ = write!(ticks, "M{px:.1},{:.1} L{px:.1},{:.1} ", y(a), y(b).min(y(a) - 1.5));
        }
        let _ = writeln!(s, r##"<path d="{ticks}" stroke="#b2182b" stroke-width="1.5"/>"##);
        // Axes labels.
        let secs = (t1 - t0) as f64 / 1e9;
        let _ = writeln!(
            s,
            r#"<text x="{ML}" y="{}">{}</text><text x="{}" y="{}" text-anchor="end">+{secs:.3} s</text>"#,
            top + PH + 14.0,
            Instant(t0),
            W - MR,
            top + PH + 14.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{smax} B</text><text x="{}" y="{}" text-anchor="end">0</text>"#,
            ML - 4.0,
            top + 10.0,
            ML - 4.0,
            top + PH
        );
    }
    if flows.iter().any(|f| f.2.truncated) {
        let _ = writeln!(
            s,
            r#"<text x="{ML}" y="{}">(only the first {MAX_POINTS} points per direction are drawn)</text>"#,
            height - 6.0
        );
    }
    s.push_str("</svg>\n");
    s
}
