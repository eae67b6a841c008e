//! `--report FILE.html`: the page is rendered by headless Chromium (`--dump-dom`, the DOM after
//! the inline script ran), then checked: the script finished without an error, the charts have
//! their elements (one CDF line per strategy, one ladder arrow per packet of the selected stall)
//! and the numbers on the page are the JSON's. Plus a snapshot of the page's data for a
//! deterministic simulate run (tests/cli/snapshots; `UPDATE_SNAPSHOTS=1` rewrites it).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::tcpstall;

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures").join(name)
}

/// The DOM after the page's scripts ran, from headless Chromium.
pub(crate) fn chromium_dom(page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Start tags of elements with `class="..."` containing `class`, as text.
fn tags<'a>(dom: &'a str, tag: &str, class: &str) -> Vec<&'a str> {
    let open = format!("<{tag} ");
    dom.match_indices(&open)
        .map(|(i, _)| &dom[i..i + dom[i..].find('>').unwrap()])
        .filter(|t| attr(t, "class").is_some_and(|c| c.split(' ').any(|w| w == class)))
        .collect()
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let i = tag.find(&key)? + key.len();
    Some(&tag[i..i + tag[i..].find('"')?])
}

/// The element with `id`'s start tag.
fn by_id<'a>(dom: &'a str, id: &str) -> &'a str {
    let i = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in the page"));
    let start = dom[..i].rfind('<').unwrap();
    &dom[start..i + dom[i..].find('>').unwrap()]
}

/// `<td ... data-k="KEY" data-v="V">TEXT</td>` cells of the table row starting at `row`.
fn cell(dom: &str, row_start: usize, key: &str) -> (f64, f64) {
    let end = row_start + dom[row_start..].find("</tr>").unwrap();
    let row = &dom[row_start..end];
    let i = row.find(&format!("data-k=\"{key}\"")).unwrap_or_else(|| panic!("no {key} cell"));
    let tag_end = i + row[i..].find('>').unwrap();
    let v: f64 = attr(&row[row[..i].rfind('<').unwrap()..tag_end], "data-v").unwrap().parse().unwrap();
    let text = &row[tag_end + 1..tag_end + row[tag_end..].find("</td>").unwrap()];
    (v, text.parse().unwrap_or_else(|_| panic!("{key}: '{text}' is not a number")))
}

fn ran_clean(dom: &str) -> &str {
    assert!(
        !dom.contains("id=\"report-error\""),
        "the page's script failed: {}",
        &dom[dom.find("report-error").unwrap()..][..300]
    );
    by_id(dom, "report-ok")
}

/// Shown number equals the JSON's: the attribute to the last bit or so (serde_json's default
/// float parser may be one unit in the last place off), the text to its 3 decimals.
fn same(what: &str, json: f64, (v, text): (f64, f64)) {
    assert!((v - json).abs() <= json.abs() * 1e-14, "{what}: data-v {v}, JSON {json}");
    assert!((text - json).abs() <= 0.0005 + json.abs() * 1e-12, "{what}: page shows {text}, JSON {json}");
}

/// The selected stall's ladder: one arrow per packet drawn, the count the page says, every
/// evidence packet of the stall inside its window among them, one arrow marked as the release.
fn check_ladder(dom: &str, stall: &Value) {
    let svg = by_id(dom, "ladder");
    let n: usize = attr(svg, "data-arrows").expect("a ladder is drawn").parse().unwrap();
    let arrows = tags(dom, "line", "arrow");
    assert_eq!(arrows.len(), n, "one arrow per packet of the stall");
    assert!(n >= 2, "a wait has at least the packet before it and the one that ended it");
    assert_eq!(tags(dom, "line", "rel").len(), 1, "one packet is marked as released");
    let frames: Vec<&str> = arrows.iter().filter_map(|a| attr(a, "data-frame")).collect();
    let (t0, t1) = (
        stall["start_ns"].as_u64().unwrap(),
        stall["start_ns"].as_u64().unwrap() + stall["length_ns"].as_u64().unwrap(),
    );
    let mut seen = 0;
    for ev in stall["evidence"].as_array().unwrap() {
        let t = ev["t_ns"].as_u64().unwrap();
        // Packets only: a kernel event (kernel evidence, `{"kernel": N}`) is a mark, not an arrow.
        let Some(num) = ev["source"]
            .as_object()
            .filter(|o| !o.contains_key("kernel"))
            .and_then(|o| o.values().next())
            .and_then(Value::as_u64)
        else {
            continue;
        };
        if (t0..=t1).contains(&t) {
            assert!(frames.contains(&num.to_string().as_str()), "evidence packet {num} has no arrow: {frames:?}");
            seen += 1;
        }
    }
    assert!(seen > 0, "the stall's evidence names packets inside the wait");
}

pub(crate) fn simulate_report_renders_with_the_json_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let (html, json) = (dir.path().join("r.html"), dir.path().join("r.json"));
    let args = ["simulate", "chunked", "--matrix", "all", "--rounds", "20", "--format", "json", "-o"];
    tcpstall().args(args).arg(&json).arg("--report").arg(&html).assert().success();
    let j: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = j["results"].as_array().unwrap();
    assert!(rows.len() >= 8);
    let dom = chromium_dom(&html);
    let ok = ran_clean(&dom);

    let lines = tags(&dom, "path", "cdf");
    assert_eq!(lines.len(), rows.len(), "one CDF line per strategy");
    assert_eq!(attr(ok, "data-cdf"), Some(rows.len().to_string().as_str()));
    for (i, r) in rows.iter().enumerate() {
        let at = dom.find(&format!("<tr data-row=\"{i}\"")).unwrap_or_else(|| panic!("no table row {i}"));
        for k in ["p50", "p90", "p99", "p999", "max", "mean"] {
            same(&format!("row {i} {k}"), r["latency_us"][k].as_f64().unwrap(), cell(&dom, at, k));
        }
        same("rounds", r["rounds"].as_f64().unwrap(), cell(&dom, at, "rounds"));
        same("stall_count", r["stall_count"].as_f64().unwrap(), cell(&dom, at, "stall_count"));
        for side in ["client", "server"] {
            for k in ["data_segs_out", "non_data_segs_out"] {
                let key = format!("{side}.{k}");
                let v = r["wire"][side][k].as_f64().unwrap();
                same(&key, v, cell(&dom, at, &key));
                // The wire-cost bar carries the same number.
                let bar = tags(&dom, "rect", "wbar")
                    .into_iter()
                    .find(|b| attr(b, "data-row") == Some(&i.to_string()) && attr(b, "data-k") == Some(&key))
                    .unwrap_or_else(|| panic!("no {key} bar for row {i}"));
                same(&key, v, (attr(bar, "data-v").unwrap().parse().unwrap(), v));
            }
        }
        // The CDF's p99 dot is the JSON's p99.
        let dot = tags(&dom, "circle", "pmark")
            .into_iter()
            .find(|c| attr(c, "data-row") == Some(&i.to_string()) && attr(c, "data-p") == Some("p99"))
            .unwrap_or_else(|| panic!("no p99 dot for row {i}"));
        let p99 = r["latency_us"]["p99"].as_f64().unwrap();
        same("p99 dot", p99, (attr(dot, "data-v").unwrap().parse().unwrap(), p99));
    }
    // The default row stalls (seed 000): its first stall record is the selected ladder.
    let first = &rows[0]["stall_records"][0];
    assert!(first.is_object(), "seed 000's default row has stall records");
    assert_eq!(attr(by_id(&dom, "ladder"), "data-stall"), Some("0"));
    check_ladder(&dom, first);
    assert!(tags(&dom, "svg", "tseq").len() >= 2, "time-sequence graphs from the model's packets");
}

pub(crate) fn explain_report_renders_a_capture() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("e.html");
    let cap = capture("seed000-default.pcap");
    let out = tcpstall().arg("explain").arg(&cap).args(["--format", "json", "--report"]).arg(&html).output().unwrap();
    assert!(out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stalls = j["flows"][0]["stalls"].as_array().unwrap();
    assert!(stalls.len() > 20, "seed 000 stalls twice per round");
    let dom = chromium_dom(&html);
    let ok = ran_clean(&dom);
    assert_eq!(attr(ok, "data-cdf"), Some("0"), "a capture has no latency samples");
    // The stall table lists the first 20 records of the flow, with the JSON's times.
    for (i, s) in stalls.iter().take(20).enumerate() {
        let at = dom.find(&format!("<tr data-stall=\"{i}\"")).unwrap_or_else(|| panic!("no stall row {i}"));
        let ms = |k: &str| (s[k].as_u64().unwrap() as f64 / 1e3).round() / 1e3;
        same(&format!("stall {i} start"), ms("start_ns"), cell(&dom, at, "start_ms"));
        same(&format!("stall {i} length"), ms("length_ns"), cell(&dom, at, "length_ms"));
        same(&format!("stall {i} confidence"), s["confidence"].as_f64().unwrap(), cell(&dom, at, "confidence"));
    }
    assert!(!dom.contains("<tr data-stall=\"20\""), "at most 20 per flow");
    assert!(dom.contains("the first 20 listed"), "the page says the list is cut");
    check_ladder(&dom, &stalls[0]);
    assert_eq!(tags(&dom, "svg", "tseq").len(), 2, "a graph per direction with data");
    assert!(dom.contains("time (ms from the connection") && dom.contains("sequence (bytes)"), "labelled axes");
}

/// Lab rows: a CDF per row from the lab's histogram, the JSON's numbers; with the row's own
/// capture (root, CAP_NET_RAW) the ladder of seed 000's first stall and the graphs, else the
/// page says why there are none.
pub(crate) fn lab_report_renders_its_rows_and_packets() {
    let dir = tempfile::tempdir().unwrap();
    let (html, json) = (dir.path().join("l.html"), dir.path().join("l.json"));
    tcpstall()
        .args(["lab", "chunked", "--rounds", "10", "-q", "--format", "json", "-o"])
        .arg(&json)
        .arg("--report")
        .arg(&html)
        .assert()
        .success();
    let j: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = j["results"].as_array().unwrap();
    let dom = chromium_dom(&html);
    let ok = ran_clean(&dom);
    assert_eq!(tags(&dom, "path", "cdf").len(), rows.len(), "one CDF line per strategy, from the lab's histogram");
    for (i, r) in rows.iter().enumerate() {
        let at = dom.find(&format!("<tr data-row=\"{i}\"")).unwrap();
        for k in ["p50", "p99", "max"] {
            same(&format!("row {i} {k}"), r["latency_us"][k].as_f64().unwrap(), cell(&dom, at, k));
        }
    }
    if rows[0]["capture"].is_object() {
        // The first ladder is the row's first TCP stall (application gaps get none); the table
        // lists row 1's records first, in order.
        let recs = rows[0]["stall_records"].as_array().unwrap();
        let k = recs.iter().position(|r| r["cause"] != "application").expect("seed 000's default row stalls");
        assert_eq!(attr(by_id(&dom, "ladder"), "data-stall"), Some(k.to_string().as_str()));
        check_ladder(&dom, &recs[k]);
        assert!(tags(&dom, "svg", "tseq").len() >= 2);
    } else {
        assert_eq!(attr(ok, "data-graphs"), Some("0"));
        assert!(dom.contains("no row recorded its packets"));
    }
}

pub(crate) fn unwritable_report_fails_before_any_work() {
    for args in [
        vec!["simulate", "chunked", "--report", "/nonexistent-dir/r.html"],
        vec!["lab", "rr", "--report", "/nonexistent-dir/r.html"],
        vec!["advise", "--model", "--report", "/nonexistent-dir/r.html"],
    ] {
        let out = tcpstall().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--report") && err.trim().lines().count() == 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing measured, nothing printed");
    }
    let out = tcpstall()
        .arg("explain")
        .arg(capture("seed000-default.pcap"))
        .args(["--report", "/nonexistent-dir/r.html"])
        .output()
        .unwrap();
    assert!(!out.status.success() && out.stdout.is_empty());
}

/// The page's data (not its pixels) for a deterministic simulate run, against the committed
/// snapshot. The header's host, date and command line are blanked.
pub(crate) fn simulate_report_data_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    tcpstall().args(["simulate", "chunked", "--rounds", "2", "--report"]).arg(&html).assert().success();
    let page = std::fs::read_to_string(&html).unwrap();
    let tag = "<script type=\"application/json\" id=\"data\">";
    let start = page.find(tag).unwrap() + tag.len();
    let mut data: Value = serde_json::from_str(&page[start..start + page[start..].find("</script>").unwrap()]).unwrap();
    for k in ["host", "date", "command", "version"] {
        data["header"][k] = Value::String(String::new());
    }
    let snap = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cli/snapshots/report-simulate-chunked-2.json");
    let got = serde_json::to_string_pretty(&data).unwrap() + "\n";
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&snap, &got).unwrap();
    }
    let want = std::fs::read_to_string(&snap).expect("snapshot (UPDATE_SNAPSHOTS=1 writes it)");
    let want: Value = serde_json::from_str(&want).unwrap();
    if want != data {
        let bad = dir.path().join("got.json");
        std::fs::write(&bad, &got).unwrap();
        panic!("report data differs from {} (UPDATE_SNAPSHOTS=1 rewrites it after review)", snap.display());
    }
}

/// advise: the ranking table carries the JSON's numbers, each ranked candidate has an error bar
/// for p50 and p99 whose ends are its 95% interval, and the recommendation and code are on the
/// page. On the model (deterministic, fast); seed 001's request.
pub(crate) fn advise_report_draws_the_ranking_with_error_bars() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("a.html");
    let out = tcpstall()
        .args(["advise", "--exchange", "client 275,24,292; server 100", "--model", "--rounds", "10", "--reps", "2"])
        .args(["-q", "--format", "json", "--lang", "go", "--report"])
        .arg(&html)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranking = j["ranking"].as_array().unwrap();
    assert!(ranking.len() >= 8, "seed 001 has at least 8 candidates");
    let dom = chromium_dom(&html);
    let ok = ran_clean(&dom);
    let bars = tags(&dom, "line", "errbar");
    let with_q: Vec<&&str> = bars.iter().filter(|b| attr(b, "data-q").is_some()).collect();
    assert_eq!(with_q.len(), 2 * ranking.len(), "a p50 and a p99 error bar per candidate");
    assert_eq!(attr(ok, "data-errbars"), Some((2 * ranking.len()).to_string().as_str()));
    for (i, r) in ranking.iter().enumerate() {
        let at = dom.find(&format!("<tr data-rank=\"{i}\"")).unwrap_or_else(|| panic!("no ranking row {i}"));
        same("stalls", r["stalls"].as_f64().unwrap(), cell(&dom, at, "stalls"));
        for (q, key) in [("p50", "p50_us"), ("p99", "p99_us")] {
            let iv = &r[key];
            same(&format!("{i} {q}"), iv["est"].as_f64().unwrap(), cell(&dom, at, q));
            same(&format!("{i} {q} lo"), iv["lo"].as_f64().unwrap(), cell(&dom, at, &format!("{q}_lo")));
            same(&format!("{i} {q} hi"), iv["hi"].as_f64().unwrap(), cell(&dom, at, &format!("{q}_hi")));
            let bar = with_q
                .iter()
                .find(|b| attr(b, "data-rank") == Some(&i.to_string()) && attr(b, "data-q") == Some(q))
                .unwrap_or_else(|| panic!("no {q} bar for candidate {i}"));
            for (k, jk) in [("data-lo", "lo"), ("data-hi", "hi"), ("data-est", "est")] {
                let v: f64 = attr(bar, k).unwrap().parse().unwrap();
                let want = iv[jk].as_f64().unwrap();
                assert!((v - want).abs() <= want.abs() * 1e-12, "candidate {i} {q} {k}: {v} vs {want}");
            }
        }
    }
    assert_eq!(ranking[0]["stalls"], 0, "the best candidate removes the stalls");
    let rec = j["recommendation"].as_str().unwrap();
    assert!(dom.contains(&rec[..40.min(rec.len())]), "the recommendation is on the page");
    assert!(by_id(&dom, "code").contains("data-lang=\"go\""), "the code in the language asked");
}

/// replay: the captured flow and the reproduced run on one page, each with its graphs and its
/// stall records, and the comparison cause by cause.
pub(crate) fn replay_report_shows_the_capture_and_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let out = tcpstall()
        .arg("replay")
        .arg(capture("http-client-post.pcap"))
        .args(["--model", "--rounds", "5", "--report"])
        .arg(&html)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dom = chromium_dom(&html);
    let ok = ran_clean(&dom);
    let graphs: usize = attr(ok, "data-graphs").unwrap().parse().unwrap();
    assert!(graphs >= 3, "both flows' time-sequence graphs (capture and run): {graphs}");
    assert!(dom.contains("captured: ") && dom.contains("reproduced (simulate"), "both flows are named");
    assert!(dom.contains("Cause by cause: the capture nagle-delayed-ack"), "the comparison is on the page");
    let rows: Vec<&str> = dom.match_indices("<tr data-stall=").map(|(i, _)| &dom[i..i + 200]).collect();
    assert!(rows.iter().any(|r| r.contains("captured")) && rows.iter().any(|r| r.contains("reproduced")));
    // --report needs the run.
    let out = tcpstall()
        .arg("replay")
        .arg(capture("http-client-post.pcap"))
        .args(["--no-run", "--report"])
        .arg(dir.path().join("x.html"))
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--no-run"));
}
