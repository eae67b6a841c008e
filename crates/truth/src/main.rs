//! `tcpstall-truth`: `corpus` generates the labelled corpus, `score` runs the classifier on it,
//! `peer` is the workload program the corpus runs in each namespace.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tcpstall_truth::{baseline, corpus, peer, score, shape};

#[derive(Parser)]
#[command(name = "tcpstall-truth", about = "Labelled ground truth for tcpstall's classifier, and its scorecard")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate the corpus: every case on real sockets, captured and labelled (needs root).
    Corpus {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where the corpus goes (never committed: captures are large and machine-specific).
        #[arg(long, default_value = "target/truth-corpus")]
        out: PathBuf,
        #[arg(long, value_enum, default_value = "full")]
        size: shape::Size,
        /// Only the cases whose name contains this.
        #[arg(long)]
        only: Option<String>,
    },
    /// Score the classifier against a corpus.
    Score {
        dir: PathBuf,
        /// Print the tables as markdown (for docs/explain.md).
        #[arg(long)]
        markdown: bool,
        /// Write the scores to the crate's committed baseline (crates/truth/scorecard.json).
        #[arg(long)]
        write_baseline: bool,
        /// With --write-baseline: keep, for each rate, the lower of the file's and this run's
        /// (the committed table as the worst of several runs).
        #[arg(long, requires = "write_baseline")]
        keep_lower: bool,
        /// Compare with the committed baseline; exit 1 on a regression of more than 2 points and one wait.
        #[arg(long)]
        check: bool,
        /// Also list every stall record whose cause the truth does not have.
        #[arg(long)]
        mismatches: bool,
    },
    /// Label a corpus again from its files (after a change of the labeler), without running it.
    Relabel { dir: PathBuf },
    /// The workload program (run by `corpus` inside a namespace).
    Peer {
        #[arg(long, value_parser = ["client", "server"])]
        role: String,
        #[arg(long)]
        addr: std::net::SocketAddr,
        /// The case (case.json).
        #[arg(long)]
        case: PathBuf,
        /// Where to write the log of writes (JSON lines).
        #[arg(long)]
        log: PathBuf,
    },
}

fn baseline_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(tcpstall_truth::BASELINE)
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.cmd {
        Cmd::Corpus { seed, out, size, only } => {
            corpus::generate(size, seed, &out, only.as_deref())?;
            Ok(0)
        }
        Cmd::Score { dir, markdown, write_baseline, keep_lower, check, mismatches } => {
            let sc = score::score(&dir)?;
            print!("{}", score::render(&sc, markdown));
            if mismatches {
                print!("\nmismatches:\n{}", score::mismatches(&sc));
            }
            if write_baseline {
                let mut b = baseline::Baseline::of(&sc);
                if keep_lower {
                    let text = std::fs::read_to_string(baseline_path())
                        .map_err(|e| anyhow::anyhow!("{}: {e}", baseline_path().display()))?;
                    let old: baseline::Baseline = serde_json::from_str(&text)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", baseline_path().display()))?;
                    b = old.lower(&b);
                }
                std::fs::write(baseline_path(), serde_json::to_string_pretty(&b)? + "\n")?;
                eprintln!("wrote {}", baseline_path().display());
            }
            if check {
                let text = std::fs::read_to_string(baseline_path())
                    .map_err(|e| anyhow::anyhow!("{}: {e}", baseline_path().display()))?;
                let b: baseline::Baseline = serde_json::from_str(&text)?;
                let bad = b.regressions(&sc, 0.02, 5);
                for r in &bad {
                    eprintln!("regression: {r}");
                }
                return Ok(i32::from(!bad.is_empty()));
            }
            Ok(0)
        }
        Cmd::Relabel { dir } => {
            let (cases, waits) = corpus::relabel(&dir)?;
            eprintln!("relabelled {cases} cases: {waits} waits");
            Ok(0)
        }
        Cmd::Peer { role, addr, case, log } => {
            let text = std::fs::read_to_string(&case).map_err(|e| anyhow::anyhow!("{}: {e}", case.display()))?;
            let c: shape::Case = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", case.display()))?;
            if role == "server" {
                peer::serve(&c, addr, &log)?;
            } else {
                peer::client(&c, addr, &log)?;
            }
            Ok(0)
        }
    }
}

fn main() {
    sys::process::default_sigpipe();
    match run(Cli::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("tcpstall-truth: {e:#}");
            std::process::exit(2);
        }
    }
}
