//! The HTML text: header and tables written here (readable without scripts), charts drawn by
//! the inline script (report.js) from the inline JSON data.

use std::fmt::Write as _;

use super::{Page, ReportData};

const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A number as the table shows it: at most 3 decimals, trailing zeros dropped.
pub(super) fn num(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

fn cell(s: &mut String, key: &str, v: f64) {
    let _ = write!(s, "<td class=\"n\" data-k=\"{key}\" data-v=\"{v}\">{}</td>", num(v));
}

pub(super) fn html(p: &Page, d: &ReportData) -> String {
    let h = &d.header;
    let mut s = String::with_capacity(1 << 16);
    let title = format!("tcpstall {} report: {}", h.mode, h.scenario);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>\n",
        esc(&title)
    );
    let _ = write!(s, "<header><h1>{}</h1><dl id=\"meta\">", esc(&title));
    for (k, v) in [
        ("command", &h.command),
        ("tcpstall", &h.version),
        ("kernel", &h.kernel),
        ("host", &h.host),
        ("date", &h.date),
        ("scenario", &h.scenario),
        ("link", &h.link),
    ] {
        let _ = write!(s, "<dt>{k}</dt><dd data-k=\"{k}\">{}</dd>", esc(v));
    }
    s.push_str("</dl>");
    if !p.rows.is_empty() {
        s.push_str("<h2>Verdicts</h2><ul id=\"verdicts\">");
        for r in &d.strategies {
            let _ = write!(s, "<li><b>{}</b>: {}</li>", esc(&r.label), esc(&r.verdict));
        }
        s.push_str("</ul>");
    }
    for e in p.errors {
        let _ = write!(s, "<p class=\"error\">error: {}</p>", esc(e));
    }
    for n in &d.notes {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(n));
    }
    s.push_str("<noscript><p class=\"error\">The charts need JavaScript; the tables do not.</p></noscript></header>\n");

    if let Some(r) = &d.ranking {
        ranking(&mut s, r);
    }
    if !p.rows.is_empty() {
        strategy_table(&mut s, d);
        s.push_str(
            "<section id=\"latency\"><h2>Latency</h2>\
             <p class=\"how\">One line per strategy: the share of samples at or below a latency \
             (y on a nines scale: 90 %, 99 %, 99.9 %), from each row's HdrHistogram (1 ns to 1 h, \
             3 significant digits). Dots are the JSON's p50, p99 and p99.9. Hover a line or a \
             table row to pick it out.</p><svg id=\"cdf\" class=\"chart\"></svg><div id=\"legend\"></div>\
             <h3>Histogram of <select id=\"chosen\"></select> <span id=\"chosen-why\"></span></h3>\
             <svg id=\"hist\" class=\"chart\"></svg></section>\n\
             <section id=\"wire\"><h2>Wire cost</h2><p class=\"how\">Segments each side put on the \
             wire in the measured rounds (data, and without data: pure ACKs plus SYN/FIN/RST), and \
             estimated wire bytes per round (payload plus headers), the JSON's <code>wire</code>.</p>\
             <svg id=\"wirebars\" class=\"chart\"></svg></section>\n",
        );
    } else {
        s.push_str(
            "<section id=\"latency\"><h2>Latency</h2><p class=\"how\">A capture of any program has no \
             latency samples (rounds are the lab's and the model's): see the stalls and the \
             time-sequence graphs.</p></section>\n",
        );
    }
    stall_table(&mut s, p, d);
    s.push_str(
        "<section id=\"timeseq\"><h2>Time-sequence graphs</h2><p class=\"how\">Per flow and \
         direction: each data segment is a vertical bar from its first to its last byte (sequence \
         numbers relative to the first), the peer's cumulative ACK (green) and its receive \
         window's right edge (grey, scaled by the shift from its SYN), stalls shaded. Drag across \
         a graph to zoom in on that time span, double-click to zoom out.</p><div id=\"graphs\"></div></section>\n",
    );
    let json = serde_json::to_string(d).unwrap_or_else(|_| "null".into()).replace('<', "\\u003c");
    let _ = write!(
        s,
        "<script type=\"application/json\" id=\"data\">{json}</script>\n<script>{JS}</script>\n</body></html>\n"
    );
    s
}

/// advise: the ranking table (the JSON's numbers), its error bars and the recommendation.
fn ranking(s: &mut String, r: &super::Ranking) {
    s.push_str(
        "<section id=\"ranking\"><h2>Ranking</h2><p class=\"how\">Each candidate ran the same \
         number of times, interleaved. Ranked by stalls removed, then p99 (overlapping intervals count \
         as equal), then segments on the wire, then the size of the code change. Latency in \
         microseconds: estimate [95% interval], the numbers of advise's JSON.</p><div class=\"scroll\">\
         <table id=\"ranktable\" class=\"sortable\"><thead><tr><th>rank</th><th>candidate</th>\
         <th>stalls</th><th>rounds</th><th>by cause</th><th>p50</th><th>p50 low</th><th>p50 high</th>\
         <th>p99</th><th>p99 low</th><th>p99 high</th><th>p99.9</th><th>segs/msg</th><th>B/msg</th>\
         <th>change</th></tr></thead><tbody>",
    );
    for (i, row) in r.rows.iter().enumerate() {
        let _ = write!(
            s,
            "<tr data-rank=\"{i}\"><td class=\"n\" data-v=\"{}\">{}</td><td data-k=\"label\">{}</td>",
            row.rank,
            row.rank,
            esc(&row.label)
        );
        cell(s, "stalls", row.stalls as f64);
        cell(s, "rounds", row.rounds as f64);
        let causes: Vec<String> = row.stalls_by_cause.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = write!(s, "<td>{}</td>", esc(&causes.join(", ")));
        for (k, v) in [
            ("p50", row.p50_us[0]),
            ("p50_lo", row.p50_us[1]),
            ("p50_hi", row.p50_us[2]),
            ("p99", row.p99_us[0]),
            ("p99_lo", row.p99_us[1]),
            ("p99_hi", row.p99_us[2]),
            ("p999", row.p999_us[0]),
            ("segments_per_message", row.segments_per_message),
            ("wire_bytes_per_message", row.wire_bytes_per_message),
            ("change_size", row.change_size as f64),
        ] {
            cell(s, k, v);
        }
        s.push_str("</tr>");
    }
    s.push_str(
        "</tbody></table></div><p class=\"how\">p50 (circle) and p99 (square) of each candidate with \
         its 95% interval as an error bar, on a log axis; the best candidate first.</p>\
         <svg id=\"errbars\" class=\"chart\"></svg>",
    );
    let _ = write!(s, "<h3>Recommendation</h3><p id=\"recommendation\">{}</p>", esc(&r.recommendation));
    if !r.code.is_empty() {
        let _ = write!(s, "<pre id=\"code\" data-lang=\"{}\">{}</pre>", esc(&r.lang), esc(&r.code));
    }
    s.push_str("</section>\n");
}

fn strategy_table(s: &mut String, d: &ReportData) {
    s.push_str(
        "<section id=\"table\"><h2>Strategies</h2><p class=\"how\">Click a heading to sort. \
         Latency in microseconds; the numbers are the JSON's.</p><div class=\"scroll\">\
         <table id=\"strategies\" class=\"sortable\"><thead><tr><th>#</th><th>strategy</th>\
         <th>rounds</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>mean</th>\
         <th>stalls</th><th>slow samples</th><th>client data segs</th><th>client non-data</th>\
         <th>server data segs</th><th>server non-data</th><th>client B/round</th><th>server B/round</th>\
         </tr></thead><tbody>",
    );
    for (i, r) in d.strategies.iter().enumerate() {
        let _ = write!(
            s,
            "<tr data-row=\"{i}\"><td class=\"n\" data-v=\"{i}\">{}</td><td data-k=\"strategy\">{}</td>",
            i + 1,
            esc(&r.label)
        );
        let l = &r.latency_us;
        cell(s, "rounds", r.rounds as f64);
        for (k, v) in
            [("p50", l.p50), ("p90", l.p90), ("p99", l.p99), ("p999", l.p999), ("max", l.max), ("mean", l.mean)]
        {
            cell(s, k, v);
        }
        match r.stall_count {
            Some(n) => cell(s, "stall_count", n as f64),
            // Not measured (no packets): a mark, not a zero.
            None => s.push_str("<td class=\"n\" data-k=\"stall_count\" title=\"not measured: no packets\">?</td>"),
        }
        cell(s, "slow_samples", r.slow_samples as f64);
        let w = &r.wire;
        cell(s, "client.data_segs_out", w.client.data_segs_out as f64);
        cell(s, "client.non_data_segs_out", w.client.non_data_segs_out as f64);
        cell(s, "server.data_segs_out", w.server.data_segs_out as f64);
        cell(s, "server.non_data_segs_out", w.server.non_data_segs_out as f64);
        cell(s, "client.bytes_per_round", r.bytes_per_msg[0]);
        cell(s, "server.bytes_per_round", r.bytes_per_msg[1]);
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table></div></section>\n");
}

fn stall_table(s: &mut String, p: &Page, d: &ReportData) {
    let _ = write!(
        s,
        "<section id=\"stalls\"><h2>Stalls</h2><p class=\"how\">{} stall record(s) in {} flow(s){}. \
         Times are ms on each connection's own clock (from its first packet). A is the client \
         (the SYN sender), B the server. Click a row with a ladder to draw every packet of that wait.</p>",
        d.stalls_total,
        d.flows_total,
        if d.stalls.len() < d.stalls_total {
            format!(
                "; the first {} listed (at most {} per flow, {} in all)",
                d.stalls.len(),
                d.limits.stalls_per_flow,
                d.limits.stalls
            )
        } else {
            String::new()
        }
    );
    if !d.stalls.is_empty() {
        s.push_str(
            "<div class=\"scroll short\"><table id=\"stalltable\" class=\"sortable\"><thead><tr><th>#</th>\
             <th>flow</th><th>start ms</th><th>length ms</th><th>held</th><th>waited</th><th>bytes</th>\
             <th>cause</th><th>conf.</th><th>evidence</th><th>ladder</th></tr></thead><tbody>",
        );
        for (i, st) in d.stalls.iter().enumerate() {
            let flow = p.flows.get(st.flow).map_or("", |f| f.label.as_str());
            let _ = write!(
                s,
                "<tr data-stall=\"{i}\"{}><td class=\"n\" data-v=\"{i}\">{}</td><td>{}</td>",
                st.ladder.map_or(String::new(), |l| format!(" data-ladder=\"{l}\" class=\"pick\"")),
                i + 1,
                esc(flow)
            );
            cell(s, "start_ms", st.start_ms);
            cell(s, "length_ms", st.length_ms);
            let _ = write!(
                s,
                "<td>{}</td><td>{}</td><td class=\"n\" data-v=\"{}\">{}</td><td class=\"cause\" title=\"{}\">{}</td>",
                esc(&st.held),
                esc(&st.waited),
                st.bytes_held,
                st.bytes_held,
                esc(st.cause.explain()),
                st.cause
            );
            cell(s, "confidence", st.confidence);
            let _ = write!(
                s,
                "<td class=\"ev\"><details><summary>{} item(s)</summary>{}<br><i>{}</i></details></td><td>{}</td></tr>",
                st.evidence.len(),
                st.evidence.iter().map(|e| esc(e)).collect::<Vec<_>>().join("<br>"),
                esc(&st.detail),
                if st.ladder.is_some() { "draw" } else { "" }
            );
        }
        s.push_str("</tbody></table></div>");
    }
    s.push_str(
        "<h3 id=\"ladder-title\">Ladder</h3><p class=\"how\" id=\"ladder-how\">Every packet from the \
         stall's start to the packet that ended it, on a real time axis (ms from the stall's start); \
         arrows leave the sender at the capture time and are slanted by half the path RTT when it is \
         known. Notes are the classifier's evidence; the released packet names the rule or timer \
         that released it.</p><svg id=\"ladder\" class=\"chart\"></svg></section>\n",
    );
}
