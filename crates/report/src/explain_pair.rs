//! `tcpstall explain A B`: two captures of the same connections, one from each end, merged
//! (crates/remote/src/two_ends.rs; docs/remote.md). The JSON is docs/json-schema.md's
//! "Explain two captures"; the table is the one users read.

use std::fmt::Write as _;

use analyze::Stall;
use serde::Serialize;
use trace::Endpoint;

use crate::cells::ms_of_ns;
use crate::Export;

/// Every connection seen in both files.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainPairDoc {
    pub merged: Vec<MergedConnection>,
    /// The two files as given (the table's first line; each connection names its client's).
    #[serde(skip)]
    pub files: [String; 2],
}

/// One connection seen at both ends.
#[derive(Debug, Clone, Serialize)]
pub struct MergedConnection {
    /// The client (sent the SYN; else the end with the higher port) and the server.
    pub client: String,
    pub server: String,
    /// The file captured at the client's end, and how that was decided.
    pub client_file: String,
    pub ends_decided: String,
    /// Server file's clock minus client file's clock, and its error bound.
    pub offset_ns: i64,
    pub offset_error_ns: u64,
    pub packets_matched: u64,
    /// The classifier's records from the client end's packets, each with its split by host.
    pub stalls: Vec<PairStall>,
}

/// A stall record and where its time went.
#[derive(Debug, Clone, Serialize)]
pub struct PairStall {
    pub stall: Stall,
    /// Null when its packets are not in both files.
    pub time_by_host_ns: Option<TimeByHost>,
}

/// A stall's length split by host, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimeByHost {
    pub client_host: u64,
    pub network: u64,
    pub server_host: u64,
}

impl MergedConnection {
    fn table(&self, s: &mut String) {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "connection {} <-> {}: client's end {} ({}); {} packets matched",
            self.client, self.server, self.client_file, self.ends_decided, self.packets_matched
        );
        let _ = writeln!(
            s,
            "  clock offset (server's file - client's file) {:+.3} ms +- {:.3} ms (from packets seen at both ends)",
            self.offset_ns as f64 / 1e6,
            ms_of_ns(self.offset_error_ns)
        );
        if self.stalls.is_empty() {
            let _ = writeln!(s, "  no stalls (the classifier, on the client end's packets)");
            return;
        }
        let _ =
            writeln!(s, "  {} stalls (the classifier, on the client end's packets); time by host:", self.stalls.len());
        let _ = writeln!(
            s,
            "     #    start s     length  cause                  held  client host    network  server host"
        );
        for (i, PairStall { stall: st, time_by_host_ns: x }) in self.stalls.iter().enumerate() {
            let held = if st.held == Endpoint::A { "client" } else { "server" };
            let split = x.map_or_else(
                || "   (its packets are not in both files)".to_string(),
                |x| {
                    format!(
                        "{:>8.2} ms {:>7.2} ms {:>9.2} ms",
                        ms_of_ns(x.client_host),
                        ms_of_ns(x.network),
                        ms_of_ns(x.server_host)
                    )
                },
            );
            let _ = writeln!(
                s,
                "  {:>4} {:>10.6} {:>8.2} ms  {:<22} {:<6}{split}",
                i + 1,
                st.start.0 as f64 / 1e9,
                ms_of_ns(st.length.0),
                st.cause.as_str(),
                held
            );
        }
    }
}

impl Export for ExplainPairDoc {
    const COMMAND: &'static str = "explain";

    fn table(&self) -> String {
        let mut s =
            format!("{} + {}: {} connection(s) seen at both ends\n", self.files[0], self.files[1], self.merged.len());
        for m in &self.merged {
            m.table(&mut s);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    #[test]
    fn the_table_splits_each_stall_by_host_and_json_keeps_the_fields() {
        let conn = MergedConnection {
            client: "10.0.0.1:5000".into(),
            server: "10.0.0.2:80".into(),
            client_file: "a.pcap".into(),
            ends_decided: "handshake".into(),
            offset_ns: -1_500_000,
            offset_error_ns: 20_000,
            packets_matched: 9,
            stalls: Vec::new(),
        };
        let doc = ExplainPairDoc { merged: vec![conn], files: ["a.pcap".into(), "b.pcap".into()] };
        let t = doc.table();
        assert!(t.starts_with("a.pcap + b.pcap: 1 connection(s) seen at both ends\n\nconnection "), "{t}");
        assert!(t.contains("-1.500 ms +- 0.020 ms"), "{t}");
        assert!(t.contains("  no stalls (the classifier"), "{t}");
        let v: serde_json::Value = serde_json::from_slice(&doc.export(Format::Json).unwrap()).unwrap();
        assert_eq!(v["merged"][0]["offset_ns"], -1_500_000);
        assert!(v.get("files").is_none(), "{v}");
        assert!(doc.export(Format::Csv).is_err());
    }
}
