//! explain's flows rendered as they finish and written, once the capture has ended, in the
//! order they were first seen: flows end in any order, and a million finished flows must not
//! stay in memory, so each flow's rendering goes to a store the caller gives (the binary's
//! spooled temporary file: memory, then an unlinked file) and is read back by range.

use std::collections::HashMap;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};

use analyze::Finished;
use serde::Serialize;
use trace::Event;

use super::{ExplainFlow, ExplainHead, ExplainSummary};
use crate::html::{FlowIn, Header, Page};
use crate::owner::FlowOwners;
use crate::{Export, ExportError, Format};

/// Rendering or reading back the flows failed.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Export(#[from] ExportError),
}

/// What the capture says of a flow's interface when the flow is rendered.
#[derive(Debug, Clone, Copy)]
pub struct Interfaces<'a> {
    /// The file has several interfaces (as far as it has been read).
    pub several: bool,
    /// It may still turn out to have several (pcapng, until its end).
    pub may_add: bool,
    /// The flow's interface's name, when the file gives one.
    pub name: Option<&'a str>,
}

/// " on interface N (NAME)": where a flow was captured, for a capture with several interfaces.
pub fn on_interface(interface: u32, name: Option<&str>) -> String {
    match name {
        Some(n) => format!(" on interface {interface} ({n})"),
        None => format!(" on interface {interface}"),
    }
}

/// Where one flow's rendering is in the store, labelled without the capture interface and with
/// it: while the capture may still turn out to have several interfaces (pcapng, until its end)
/// each flow is rendered both ways, and the end picks one.
#[derive(Debug, Clone, Copy, Default)]
struct Piece {
    plain: Option<(u64, u64)>,
    on_interface: Option<(u64, u64)>,
}

impl Piece {
    fn range(&self, several_interfaces: bool) -> Option<(u64, u64)> {
        if several_interfaces {
            self.on_interface.or(self.plain)
        } else {
            self.plain.or(self.on_interface)
        }
    }
}

/// The finished flows' renderings (text, CSV/Markdown rows or compact JSON objects) in `S`.
pub struct ExplainFlows<S: Write + Seek> {
    store: BufWriter<S>,
    len: u64,
    pieces: Vec<Piece>,
    format: Format,
    app_gaps: bool,
}

impl<S: Read + Write + Seek> ExplainFlows<S> {
    /// `app_gaps`: the text and rows list ambiguous pauses and application gaps too.
    pub fn new(store: S, format: Format, app_gaps: bool) -> Self {
        ExplainFlows { store: BufWriter::with_capacity(1 << 16, store), len: 0, pieces: Vec::new(), format, app_gaps }
    }

    /// Flows seen (finished flows' ids are dense, from 0).
    pub fn count(&self) -> usize {
        self.pieces.len()
    }

    /// One finished flow, labelled without the capture interface, with it, or both while the
    /// decoder cannot tell yet.
    pub fn push(&mut self, f: &Finished, on: Interfaces, owners: &FlowOwners) -> Result<(), StreamError> {
        let key = &f.key;
        let labelled = format!("{key}{}", on_interface(key.interface, on.name));
        let (plain, labelled) = match (on.several, on.may_add) {
            (true, _) => (None, Some(labelled)),
            (false, true) => (Some(key.to_string()), Some(labelled)),
            (false, false) => (Some(key.to_string()), None),
        };
        let mut one = |label: String| -> Result<(u64, u64), StreamError> {
            let mut flow = ExplainFlow::new(
                f.id.0 as usize + 1,
                key.a.to_string(),
                key.b.to_string(),
                key.interface,
                label,
                &f.analysis,
            );
            flow.app_gaps = self.app_gaps;
            flow.owners = owners.clone();
            let bytes = match self.format {
                Format::Json => serde_json::to_vec(&flow)?,
                format => flow.export(format)?,
            };
            self.store.write_all(&bytes)?;
            let from = self.len;
            self.len += bytes.len() as u64;
            Ok((from, self.len))
        };
        let piece =
            Piece { plain: plain.map(&mut one).transpose()?, on_interface: labelled.map(&mut one).transpose()? };
        let i = f.id.0 as usize;
        if self.pieces.len() <= i {
            self.pieces.resize(i + 1, Piece::default());
        }
        self.pieces[i] = piece;
        Ok(())
    }

    /// Writes the report: the text's summary then each flow's block, the CSV/Markdown header then
    /// each flow's rows, or one JSON document (schema v2, docs/json-schema.md) with `head` first
    /// and the flows read back one at a time ([`super::write_json`]).
    pub fn write<D: Serialize>(
        self,
        mut w: impl Write,
        several_interfaces: bool,
        summary: &ExplainSummary,
        head: &ExplainHead<'_, D>,
    ) -> Result<(), StreamError> {
        let format = self.format;
        let mut store = self.store.into_inner().map_err(|e| e.into_error())?;
        let mut flows = self.pieces.iter().filter_map(|p| p.range(several_interfaces)).map(|(from, to)| {
            let mut v = vec![0; (to - from) as usize];
            store.seek(SeekFrom::Start(from))?;
            store.read_exact(&mut v).map(|()| v)
        });
        let header = match format {
            Format::Json => {
                let flows = flows.map(|f| f.and_then(|v| String::from_utf8(v).map_err(std::io::Error::other)));
                return Ok(super::write_json(w, head, flows)?);
            }
            Format::Table => summary.text(),
            Format::Csv => ExplainFlow::CSV_HEADER.to_string(),
            Format::Markdown => ExplainFlow::MARKDOWN_HEADER.to_string(),
        };
        w.write_all(header.as_bytes())?;
        flows.try_for_each(|flow| w.write_all(&flow?))?;
        Ok(())
    }
}

/// A flow's packets kept for the HTML page, and how many more were not kept.
type Packets = (Vec<Event>, u64);

/// explain's `--report` page: each flow's packets (at most `limit` a flow; beyond them the page
/// says the flow was cut) while it is alive, and the flows once finished.
#[derive(Debug, Default)]
pub struct ExplainPackets {
    limit: usize,
    live: HashMap<u32, Packets>,
    done: Vec<(Finished, Packets)>,
}

impl ExplainPackets {
    pub fn new(limit: usize) -> Self {
        ExplainPackets { limit, ..ExplainPackets::default() }
    }

    /// One packet (or other event) of the flow with id `flow`.
    pub fn keep(&mut self, flow: u32, event: &Event) {
        let (kept, cut) = self.live.entry(flow).or_default();
        if kept.len() < self.limit {
            kept.push(event.clone());
        } else {
            *cut += 1;
        }
    }

    /// A flow finished: its packets stay for the page.
    pub fn finished(&mut self, f: Finished) {
        if let Some(p) = self.live.remove(&f.id.0) {
            self.done.push((f, p));
        }
    }

    /// The finished flows the page will show.
    pub fn flows(&self) -> usize {
        self.done.len()
    }

    /// The page: the flows' stall tables, ladders and time-sequence graphs in first-seen order.
    /// `name` gives an interface's name; the labels say the interface when there are `several`.
    /// `damaged` is the error that ended the file.
    pub fn page<'a, 'n>(
        &'a mut self,
        header: Header,
        several: bool,
        name: impl Fn(u32) -> Option<&'n str>,
        damaged: Option<String>,
    ) -> Page<'a> {
        self.done.sort_by_key(|(f, _)| f.id);
        let flows = self
            .done
            .iter()
            .map(|(f, (ev, cut))| FlowIn {
                label: format!(
                    "flow {}: {}{}",
                    f.id.0 + 1,
                    f.key,
                    if several { on_interface(f.key.interface, name(f.key.interface)) } else { String::new() }
                ),
                row: None,
                stalls: &f.analysis.stalls,
                events: Some(ev.as_slice()),
                events_note: (*cut > 0)
                    .then(|| format!("only its first {} packets are drawn ({cut} more not kept)", ev.len())),
                rtt_ns: f.analysis.path_rtt.map(|d| d.0),
                capture_point: f.analysis.capture_note.clone(),
                capture_at: match f.analysis.capture_point {
                    trace::CapturePoint::AtA => Some(trace::Endpoint::A),
                    trace::CapturePoint::AtB => Some(trace::Endpoint::B),
                    _ => None,
                },
            })
            .collect();
        let notes =
            damaged.map(|e| format!("DAMAGED FILE: {e}; the page covers the packets before it")).into_iter().collect();
        Page { header, rows: &[], flows, errors: &[], notes, ranking: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(id: u32, port: u16) -> Finished {
        let at = |p: u16| std::net::SocketAddr::from(([10, 0, 0, 1], p));
        Finished {
            id: wire::FlowId(id),
            key: wire::FlowKey { a: at(port), b: at(80), interface: 1 },
            end: None,
            analysis: analyze::FlowAnalyzer::new(analyze::Config::default()).finish(),
        }
    }

    fn head(decode: &u64) -> ExplainHead<'_, u64> {
        ExplainHead {
            tool: "tcpstall",
            version: "0",
            schema_version: crate::SCHEMA_VERSION,
            mode: "explain",
            file: "f".into(),
            decode,
            error: None,
        }
    }

    /// Flows finish in any order and are written in first-seen order, read back across the
    /// store's memory and its temporary file (a 1 KB spool moves to the file at once).
    #[test]
    fn flows_are_written_in_first_seen_order_across_memory_and_file() {
        let on = Interfaces { several: false, may_add: false, name: None };
        let mut flows = ExplainFlows::new(tempfile::SpooledTempFile::new(1024), Format::Table, true);
        let mut wanted = ExplainSummary::default().text();
        for id in (0..300u32).rev() {
            flows.push(&finished(id, 1000 + id as u16), on, &Default::default()).unwrap();
        }
        for id in 0..300u32 {
            let fa = finished(id, 1000 + id as u16);
            let label = fa.key.to_string();
            let mut f =
                ExplainFlow::new(id as usize + 1, fa.key.a.to_string(), "10.0.0.1:80".into(), 1, label, &fa.analysis);
            f.app_gaps = true;
            wanted.push_str(&f.table());
        }
        let mut out = Vec::new();
        flows.write(&mut out, false, &ExplainSummary::default(), &head(&0)).unwrap();
        assert!(wanted.contains("flow 300: 10.0.0.1:1299 <-> 10.0.0.1:80"), "{wanted}");
        assert_eq!(String::from_utf8(out).unwrap(), wanted);
    }

    /// A pcapng flow is rendered both ways until the end says whether there were several
    /// interfaces; the text names the interface only then.
    #[test]
    fn the_interface_is_named_only_when_the_capture_has_several() {
        let on = Interfaces { several: false, may_add: true, name: Some("eth0") };
        for (several, label) in [(false, "flow 1: 10.0.0.1:1000 <-> 10.0.0.1:80 "), (true, "on interface 1 (eth0)")] {
            let mut flows = ExplainFlows::new(std::io::Cursor::new(Vec::new()), Format::Table, false);
            flows.push(&finished(0, 1000), on, &Default::default()).unwrap();
            let mut out = Vec::new();
            flows.write(&mut out, several, &ExplainSummary::default(), &head(&0)).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains(label), "{text}");
            assert_eq!(text.contains("on interface"), several, "{text}");
        }
    }
}
