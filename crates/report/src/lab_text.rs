//! The lab and simulate report's text forms: the table, CSV and Markdown, one function each,
//! behind `Export for Report` (document.rs), which adds JSON from serde. The table is for people; JSON
//! is the stable contract; CSV and Markdown are for spreadsheets and documents.

use crate::cells::{aligned, csv_field, md_cell, md_escape, ms_column};
use crate::{Report, RunResult, WireSide};

/// Bytes, short: 1234 -> "1234", 123456 -> "121K", 12345678 -> "11.8M" (binary units, as the
/// seed's tshark sums were).
fn bytes(b: u64) -> String {
    if b < 10_000 {
        b.to_string()
    } else if b < 10 * 1024 * 1024 {
        format!("{:.0}K", b as f64 / 1024.0)
    } else {
        format!("{:.1}M", b as f64 / (1024.0 * 1024.0))
    }
}

/// Row label: the strategy, prefixed by the workload variant when there is one.
pub fn label(r: &RunResult) -> String {
    if r.variant.is_empty() {
        r.strategy.clone()
    } else {
        format!("{} / {}", r.variant, r.strategy)
    }
}

fn per_round_ms(r: &RunResult) -> f64 {
    if r.rounds == 0 {
        0.0
    } else {
        r.wall_s * 1e6 / r.rounds as f64
    }
}

fn onoff(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "?",
    }
}

/// Every row's stall records for people (`--stalls`): one line per record with its sides,
/// cause and confidence, then its evidence, times in ms on the row's trace clock.
pub fn stall_records_text(r: &Report) -> String {
    let mut out = String::new();
    for x in &r.results {
        let label = if x.variant.is_empty() { x.strategy.clone() } else { format!("{} {}", x.strategy, x.variant) };
        out.push_str(&format!(
            "\nstall records: {label} ({})\n",
            if x.stall_records.is_empty() { "none".to_string() } else { x.stall_summary.counts_text() }
        ));
        for (i, s) in x.stall_records.iter().enumerate() {
            let window = (x.measured_from_ns..=x.measured_to_ns).contains(&s.start.0);
            out.push_str(&format!(
                "  {:>3} {:>10.3} ms {:>8.2} ms  {} waited, {} held {} B  {} {:.2}{}\n",
                i + 1,
                s.start.0 as f64 / 1e6,
                s.length.as_millis_f64(),
                s.waited.role(),
                s.held.role(),
                s.bytes_held,
                s.cause,
                s.confidence,
                if window || x.measured_to_ns == 0 { "" } else { "  (outside the measured rounds)" }
            ));
            for e in &s.evidence {
                out.push_str(&format!("        {:>10.3} ms  {}\n", e.t.0 as f64 / 1e6, e.what));
            }
            out.push_str(&format!("        {}\n", s.detail));
        }
    }
    out
}

/// What produced the results: "Linux 6.18.0" for the lab, "model linux" for simulate.
fn host(r: &Report) -> String {
    match (&r.kernel, &r.profile) {
        (Some(k), _) => format!("Linux {k}"),
        (None, Some(p)) => format!("model {p}"),
        (None, None) => "unknown".to_string(),
    }
}

/// The options of one side. In the lab, TCP_QUICKACK read back is a state, not a setting that
/// holds (do_tcp_getsockopt returns `!inet_csk_in_pingpong_mode`, net/ipv4/tcp.c): it is labelled
/// `quickack-state` there; the model reports whether the strategy asked for it.
fn applied(a: &crate::Applied, model: bool) -> String {
    let qa = if model { "quickack" } else { "quickack-state" };
    let mut s = format!("nodelay={} cork={}", onoff(a.nodelay), onoff(a.cork));
    if !model {
        s.push_str(&format!(" {qa}={}", onoff(a.quickack_state)));
    }
    if let Some(m) = a.mss {
        s.push_str(&format!(" mss={m}"));
    }
    if let Some(c) = &a.congestion {
        s.push_str(&format!(" cc={c}"));
    }
    if a.strategies.iter().any(|x| x == "busy-poll") {
        // The spin is the strategy; SO_BUSY_POLL is only granted with CAP_NET_ADMIN.
        s.push_str(&format!(" reads=spin so_busy_poll={}", a.busy_poll_us.map_or("-".into(), |u| format!("{u}us"))));
    }
    s
}

fn params(p: &serde_json::Value) -> String {
    match p {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                // As `tcpstall scenarios` prints it: `[]` for an empty list (`--set k=` and
                // `--set k=[]` both set one), else `a,b`.
                serde_json::Value::Array(a) if a.is_empty() => format!("{k}=[]"),
                serde_json::Value::Array(a) => {
                    let items: Vec<String> = a.iter().map(|x| x.to_string()).collect();
                    format!("{k}={}", items.join(","))
                }
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn wire_cells(w: &WireSide) -> [String; 5] {
    [
        w.segs_out.to_string(),
        w.data_segs_out.to_string(),
        w.non_data_segs_out.to_string(),
        bytes(w.bytes_sent),
        bytes(w.wire_bytes),
    ]
}

/// The report as the table for people.
pub(crate) fn table(r: &Report) -> String {
    let mut out = format!("{} {}: {} on {} ({})\n", r.tool, r.mode, r.scenario, host(r), r.link);
    let p = params(&r.params);
    if !p.is_empty() {
        out.push_str(&format!("params: {p}\n"));
    }
    if r.results.is_empty() {
        out.push_str("no results\n");
        return out;
    }
    out.push('\n');
    let mut rows = vec![[
        "strategy", "ms/round", "p50", "p99", "max", "stalls", "segs", "data", "acks", "bytes", "wire", "segs", "data",
        "acks", "bytes", "wire",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()];
    for x in &r.results {
        let mut row = vec![
            label(x),
            ms_column(per_round_ms(x)),
            ms_column(x.latency_us.p50),
            ms_column(x.latency_us.p99),
            ms_column(x.latency_us.max),
            stalls_cell(x),
        ];
        row.extend(wire_cells(&x.wire.client));
        row.extend(wire_cells(&x.wire.server));
        rows.push(row);
    }
    // The group headers must not widen their columns: lay out the body, then place them.
    let body = aligned(&rows, "  ");
    let header = group_header(&body);
    out.push_str(&header);
    out.push_str(&body);
    sections(r, &mut out);
    footnotes(r, &mut out);
    out
}

/// The table's per-row sections: verdicts, options held (or modelled), CPU cost.
fn sections(r: &Report, out: &mut String) {
    out.push_str("\nverdicts:\n");
    let w = r.results.iter().map(|x| label(x).chars().count() + 2).max().unwrap_or(0);
    for x in &r.results {
        let l = format!("  {}", label(x));
        out.push_str(&format!("{l:<w$}  {}\n", x.verdict));
    }
    let model = r.mode == "simulate";
    out.push_str(if model {
        "\noptions as modelled (the profile's rules applied to each strategy):\n"
    } else {
        "\noptions held (read back with getsockopt after the measured rounds):\n"
    });
    for x in &r.results {
        let l = format!("  {}", label(x));
        out.push_str(&format!("{l:<w$}  client {}; server {}\n", applied(&x.client, model), applied(&x.server, model)));
    }
    if !model {
        out.push_str(
            "  (quickack-state is what getsockopt(TCP_QUICKACK) reports: the socket's ACK mode at that moment, \
             on = not in interactive 'pingpong' mode; TCP_QUICKACK never holds, so 'on' does not mean it was set)\n",
        );
    }
    if r.results.iter().any(|x| x.cpu.is_some()) {
        out.push_str("\ncpu (both sides' threads over the measured rounds, CLOCK_THREAD_CPUTIME_ID):\n");
        for x in &r.results {
            if let Some(c) = &x.cpu {
                let l = format!("  {}", label(x));
                out.push_str(&format!(
                    "{l:<w$}  {:.1} us/round (client {:.1} ms, server {:.1} ms; {:.2} of one CPU)\n",
                    c.cpu_us_per_round,
                    c.client_cpu_us / 1e3,
                    c.server_cpu_us / 1e3,
                    c.cpu_share_of_wall
                ));
            }
        }
    }
}

/// What the table's columns mean, for the lab or the model.
fn footnotes(r: &Report, out: &mut String) {
    let model = r.mode == "simulate";
    // Lab and model time the same window: the client's first measured round to the end of
    // its last (`wall_s`); a wait outside it is named in the verdict, not counted.
    out.push_str("\nms/round: wall time of the measured rounds / rounds (prologue, warm-up and epilogue excluded);\n");
    // A scenario that pauses between rounds (burst's interval_ms) spends that pause inside
    // the measured window: say so beside the number, with the pause.
    if let Some(ms) = r.params.get("interval_ms").and_then(|v| v.as_f64()).filter(|ms| *ms > 0.0) {
        out.push_str(&format!(
            "  (it includes the scenario's own pause of interval_ms={ms} between rounds; p50/p99/max do not)\n"
        ));
    }
    out.push_str(if model {
        "stalls: stall records in the measured rounds, named by the classifier from the packets the model sent \
         (--stalls lists them);\n"
    } else {
        "stalls: stall records in the measured rounds, named by the classifier from the row's own packets \
         (--stalls lists them);\n"
    });
    if let Some(n) = not_measured_note(r) {
        out.push_str(&n);
    }
    out.push_str(if model {
        "segs = data + acks (counted by the model); wire = payload + link, IP and TCP headers per segment\n"
    } else {
        "segs = data + acks (tcp_info); \
         wire = payload + 66 header bytes per segment (Ethernet 14, IPv4 20, TCP 20, timestamps 12)\n"
    });
}

/// Put "latency ms", "client->server", "server->client" above their column groups, using the
/// positions of the column titles in the body's first line.
fn group_header(body: &str) -> String {
    let first = body.lines().next().unwrap_or("");
    let find = |needle: &str, from: usize| first[from..].find(needle).map(|i| i + from);
    let mut line = String::new();
    let mut place = |text: &str, at: Option<usize>| {
        if let Some(at) = at {
            if line.len() < at {
                line.push_str(&" ".repeat(at - line.len()));
            } else {
                line.push(' ');
            }
            line.push_str(text);
        }
    };
    let p50 = find("p50", 0);
    place("latency ms", p50.map(|i| i.saturating_sub(2)));
    let segs1 = find("segs", 0);
    place("client -> server", segs1.map(|i| i.saturating_sub(2)));
    let segs2 = segs1.and_then(|i| find("segs", i + 4));
    place("server -> client", segs2.map(|i| i.saturating_sub(2)));
    line.push('\n');
    line
}

/// The report as CSV: one line per row.
pub(crate) fn csv(r: &Report) -> String {
    let mut head: Vec<String> = [
        "scenario",
        "strategy",
        "variant",
        "client_strategies",
        "server_strategies",
        "rounds",
        "wall_s",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
        "mean_us",
        "stall_count",
        "slow_samples",
        "slow_sample_threshold_us",
        "throughput_bytes_per_s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for side in ["client", "server"] {
        for f in ["segs_out", "data_segs_out", "non_data_segs_out", "bytes_sent", "wire_bytes"] {
            head.push(format!("{side}_{f}"));
        }
    }
    head.extend(["stall".to_string(), "cause".into(), "verdict".into()]);
    let mut out = head.join(",");
    out.push('\n');
    for x in &r.results {
        let l = &x.latency_us;
        let mut f: Vec<String> = vec![
            r.scenario.clone(),
            x.strategy.clone(),
            x.variant.clone(),
            x.client.strategies.join("+"),
            x.server.strategies.join("+"),
            x.rounds.to_string(),
            format!("{:.6}", x.wall_s),
            format!("{:.1}", l.p50),
            format!("{:.1}", l.p90),
            format!("{:.1}", l.p99),
            format!("{:.1}", l.p999),
            format!("{:.1}", l.max),
            format!("{:.1}", l.mean),
            x.stall_count.map_or(String::new(), |n| n.to_string()),
            x.slow_samples.to_string(),
            format!("{:.1}", x.slow_sample_threshold_us),
            format!("{:.0}", x.throughput_bytes_per_s),
        ];
        for w in [&x.wire.client, &x.wire.server] {
            f.extend(
                [w.segs_out, w.data_segs_out, w.non_data_segs_out, w.bytes_sent, w.wire_bytes].map(|n| n.to_string()),
            );
        }
        f.push(x.verdict_key.stalls.to_string());
        f.push(x.verdict_key.cause.map(|c| c.as_str().to_string()).unwrap_or_default());
        f.push(x.verdict.clone());
        let line: Vec<String> = f.iter().map(|s| csv_field(s)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// The stall count, or `?` when the row has no packets to classify (not measured is not 0).
fn stalls_cell(x: &RunResult) -> String {
    x.stall_count.map_or_else(|| "?".to_string(), |n| n.to_string())
}

/// The footnote for `?` in the stalls column, when a row has one.
fn not_measured_note(r: &Report) -> Option<String> {
    let x = r.results.iter().find(|x| x.stall_count.is_none())?;
    Some(format!(
        "?: stalls not measured (not zero): the row recorded no packets for the classifier (its verdict says why: \
         the lab captures as root or with CAP_NET_RAW, not with --no-capture or --path veth); its slow samples, \
         rounds that waited over {:.0} ms, are in the verdict\n",
        x.slow_sample_threshold_us / 1e3
    ))
}

/// The report as a Markdown table, its notes and errors.
pub(crate) fn markdown(r: &Report) -> String {
    let host = host(r);
    let mut out = format!("**{} {}** `{}` on {host} ({})\n\n", r.tool, r.mode, r.scenario, r.link);
    let p = params(&r.params);
    if !p.is_empty() {
        out.push_str(&format!("Parameters: `{p}`\n\n"));
    }
    out.push_str(
            "| strategy | ms/round | p50 ms | p99 | max | stalls | c→s segs | data | acks | wire B | s→c segs | data | acks | wire B | verdict |\n",
        );
    out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for x in &r.results {
        let (c, s) = (&x.wire.client, &x.wire.server);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            md_cell(&label(x)),
            ms_column(per_round_ms(x)),
            ms_column(x.latency_us.p50),
            ms_column(x.latency_us.p99),
            ms_column(x.latency_us.max),
            stalls_cell(x),
            c.segs_out,
            c.data_segs_out,
            c.non_data_segs_out,
            c.wire_bytes,
            s.segs_out,
            s.data_segs_out,
            s.non_data_segs_out,
            s.wire_bytes,
            md_cell(&x.verdict)
        ));
    }
    if let Some(n) = not_measured_note(r) {
        out.push_str(&format!("\n{}", md_escape(&n)));
    }
    for e in &r.errors {
        out.push_str(&format!("\n**Error:** {}\n", md_escape(e)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Applied, Format, Latency, Wire};
    use trace::{Cause, VerdictKey};

    /// The report in `format`, through the one exporter (`Export for Report`).
    fn export(r: &Report, format: Format) -> Vec<u8> {
        crate::Export::export(r, format).unwrap()
    }

    fn sample() -> Report {
        let row = |name: &str, stalls: u64, p50: f64, segs: u64| RunResult {
            strategy: name.into(),
            variant: String::new(),
            client: Applied {
                strategies: vec![],
                nodelay: Some(false),
                cork: Some(false),
                quickack_state: Some(true),
                mss: Some(1448),
                congestion: Some("bbr".into()),
                busy_poll_us: None,
            },
            server: Applied::default(),
            rounds: 100,
            latency_us: Latency { p50, p90: p50, p99: p50, p999: p50, max: p50, mean: p50 },
            slow_samples: stalls,
            slow_sample_threshold_us: 10_020.0,
            stall_count: Some(stalls),
            stall_summary: Default::default(),
            stall_records: vec![],
            measured_from_ns: 0,
            measured_to_ns: 0,
            capture: None,
            wall_s: p50 * 100.0 / 1e6,
            throughput_bytes_per_s: 1.0,
            wire: Wire {
                client: WireSide {
                    segs_out: segs,
                    data_segs_out: segs / 2,
                    non_data_segs_out: segs / 2,
                    bytes_sent: 100_000,
                    wire_bytes: 100_000 + segs * 66,
                },
                server: WireSide::default(),
            },
            cpu: None,
            tcp: None,
            netstat: Default::default(),
            verdict: if stalls > 0 { "stalls ~40 ms x2 per round: Nagle, \"held\"".into() } else { "no stalls".into() },
            verdict_key: VerdictKey { stalls: stalls > 0, cause: (stalls > 0).then_some(Cause::NagleDelayedAck) },
            latency_dist: None,
            packets: Vec::new(),
            samples_ns: Vec::new(),
            owners: Default::default(),
        };
        Report {
            tool: "tcpstall".into(),
            version: "0.1.0".into(),
            schema_version: crate::SCHEMA_VERSION,
            kernel: Some("6.18".into()),
            profile: None,
            mode: "lab".into(),
            scenario: "chunked".into(),
            params: serde_json::json!({"send": 1000, "n_chunk": 100, "round": 100}),
            link: "loopback".into(),
            results: vec![row("default", 200, 83_000.0, 600), row("nodelay", 0, 1400.0, 20_000)],
            errors: vec![],
        }
    }

    #[test]
    fn json_round_trips() {
        let r = sample();
        let back: Report = serde_json::from_slice(&export(&r, Format::Json)).unwrap();
        assert_eq!(back, r);
        let v: serde_json::Value = serde_json::from_slice(&export(&r, Format::Json)).unwrap();
        assert_eq!(v["results"][0]["verdict_key"]["cause"], "nagle-delayed-ack");
        assert_eq!(v["results"][1]["wire"]["client"]["non_data_segs_out"], 10_000);
        assert!(v.get("errors").is_none(), "empty errors are left out");
    }

    #[test]
    fn csv_quotes_verdicts_with_commas_and_quotes() {
        let text = String::from_utf8(export(&sample(), Format::Csv)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("scenario,strategy,variant,"));
        assert!(
            lines[1].ends_with(",true,nagle-delayed-ack,\"stalls ~40 ms x2 per round: Nagle, \"\"held\"\"\""),
            "{}",
            lines[1]
        );
        let header_cols = lines[0].split(',').count();
        assert_eq!(lines[2].split(',').count(), header_cols);
    }

    #[test]
    fn table_has_one_row_per_strategy_and_the_verdicts() {
        let text = String::from_utf8(export(&sample(), Format::Table)).unwrap();
        assert!(text.contains("params: n_chunk=100 round=100 send=1000"), "{text}");
        let row = text.lines().find(|l| l.starts_with("default ")).unwrap();
        assert!(row.contains(" 830 ") || row.contains("83.0"), "{row}");
        assert!(text.contains("client -> server"));
        assert!(text.contains("  nodelay  no stalls"), "{text}");
        assert!(text.contains("nodelay=off cork=off quickack-state=on mss=1448 cc=bbr"), "{text}");
        assert!(text.contains("TCP_QUICKACK never holds"), "{text}");
        assert!(
            text.contains(
                "ms/round: wall time of the measured rounds / rounds (prologue, warm-up and epilogue excluded)"
            ),
            "{text}"
        );
        let mut m = sample();
        m.mode = "simulate".into();
        (m.kernel, m.profile) = (None, Some("linux".into()));
        let text = String::from_utf8(export(&m, Format::Table)).unwrap();
        // The model reads no TCP_QUICKACK state back: it is not shown.
        assert!(text.contains("nodelay=off cork=off mss=1448"), "{text}");
        assert!(text.contains("on model linux"), "{text}");
    }

    #[test]
    fn markdown_escapes_pipes() {
        let mut r = sample();
        r.results[0].verdict = "a | b".into();
        let text = String::from_utf8(export(&r, Format::Markdown)).unwrap();
        assert!(text.contains("a \\| b"));
        assert_eq!(text.lines().filter(|l| l.starts_with("| ")).count(), 3);
    }
}
