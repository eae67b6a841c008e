//! `tcpstall simulate`: run a scenario on the deterministic model of other TCP stacks
//! (crates/model), printing the same table and JSON as `tcpstall lab`.

use std::path::Path;

use anyhow::Context;
use model::{Outcome, Profile, ProfileSpec, RunSpec};
use report::simulate::CompareProfilesDoc;
use report::Export;
use scenario::Scenario;
use trace::Event;

use super::output;
use crate::flags::common::OutputFormat;
use crate::flags::simulate::{request, scenario_from, SimulateArgs};

/// `--profile`: the pairs it names (parsed by the model; files read here, `linux:here`
/// measured by `tcpstall kernel`'s experiments).
pub(crate) fn profiles(spec: &str) -> anyhow::Result<Vec<(Profile, Profile)>> {
    resolve(&spec.parse()?)
}

fn resolve(spec: &ProfileSpec) -> anyhow::Result<Vec<(Profile, Profile)>> {
    Ok(spec.load(|p| std::fs::read_to_string(p), super::kernel::here_profile)?)
}

pub(crate) fn run_spec(args: &SimulateArgs) -> anyhow::Result<RunSpec> {
    let req = request(args)?;
    Ok(req.spec(profiles(&args.profile)?))
}

pub(crate) fn run(args: SimulateArgs) -> anyhow::Result<i32> {
    if args.list_profiles {
        output::write_bytes(model::story::profile_list().as_bytes(), args.common.output.as_deref())?;
        return Ok(0);
    }
    let s = scenario_from(&args)?;
    if let Some(list) = &args.compare_profiles {
        return compare_profiles(&args, &s, list);
    }
    let spec = run_spec(&args)?;
    let pairs = s.matrix.clone();
    // Open the output before simulating, so a path that cannot be written fails first.
    let sink = output::Sink::open(args.common.output.as_deref())?;
    if let Some(p) = &args.pcap {
        output::check_writable("--pcap", p)?;
    }
    if let Some(p) = &args.report {
        output::check_writable("--report", p)?;
    }
    let record = args.trace || args.pcap.is_some() || args.report.is_some();
    // Every sample is kept only for the HTML report's CDF: without it memory stays flat in rounds.
    let keep = model::Keep { trace: record, samples: args.report.is_some() };
    let (report, outcomes) = model::report_kept(&s, &pairs, &spec, keep);
    sink.write(&report.export(args.common.format.into())?).context("writing the report")?;
    output::stall_records(&report, &args.common)?;
    if let Some(path) = &args.pcap {
        write_pcap(path, &report, &outcomes)?;
    }
    if let Some(path) = &args.report {
        write_html(path, &report, &outcomes, &spec)?;
    }
    if args.common.format == OutputFormat::Table && args.common.output.is_none() {
        // What the numbers rest on: say which profiles carry unchecked values.
        for note in model::story::unverified_notes(&spec.profiles) {
            println!("{note}");
        }
    }
    if args.trace {
        let text = model::story::stall_stories(&report, &outcomes);
        if args.common.format == OutputFormat::Table && args.common.output.is_none() {
            output::write_bytes(text.as_bytes(), None)?;
        } else {
            eprint!("{text}");
        }
    }
    if let Some(e) = report.errors.first() {
        eprintln!("tcpstall: {e}");
        return Ok(1);
    }
    Ok(0)
}

/// `--pcap`: the rows' connections as one capture file, and which connection is which row.
fn write_pcap(path: &Path, report: &report::Report, outcomes: &[Outcome]) -> anyhow::Result<()> {
    let traces: Vec<&[trace::Event]> = outcomes.iter().map(|o| o.trace.as_slice()).collect();
    let bytes = model::pcap::to_pcap(&traces)?;
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    let (port0, server_port) = (model::pcap::CLIENT_PORT0, model::pcap::SERVER.1);
    for line in report::simulate::pcap_lines(&path.display().to_string(), report, port0, server_port) {
        eprintln!("{line}");
    }
    Ok(())
}

/// `--report`: the HTML page, with the model's packets as each row's time-sequence graph.
fn write_html(path: &Path, report: &report::Report, outcomes: &[Outcome], spec: &RunSpec) -> anyhow::Result<()> {
    let kernel = format!("model, profile {}", report.profile.as_deref().unwrap_or("?"));
    let header = super::htmlreport::header("simulate", &report.scenario, &report.link, kernel);
    let traces: Vec<&[Event]> = outcomes.iter().map(|o| o.trace.as_slice()).collect();
    let rtt = Some(spec.link.delay_up_ns + spec.link.delay_down_ns);
    let mut page = super::htmlreport::rows_page(report, header, &traces, rtt, "the model recorded no packets", None);
    for (f, o) in page.flows.iter_mut().zip(outcomes) {
        if o.trace.len() >= model::TRACE_LIMIT {
            f.events_note = Some(format!("the model kept the first {} events only", model::TRACE_LIMIT));
        }
    }
    super::htmlreport::write(path, &page)?;
    Ok(())
}

/// `--compare-profiles`: the scenario's strategies on each profile, side by side
/// (report::simulate::CompareProfilesDoc).
fn compare_profiles(args: &SimulateArgs, s: &Scenario, list: &str) -> anyhow::Result<i32> {
    let pairs = resolve(&ProfileSpec::compare_list(list)?)?;
    let cols = request(args)?.compare(s, pairs);
    let doc = CompareProfilesDoc::new(&s.name, env!("CARGO_PKG_VERSION"), &cols);
    output::write_bytes(&doc.export(args.common.format.into())?, args.common.output.as_deref())?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::simulate::tests::parse;

    /// The flags reach the model's parsers: their messages are the user's.
    #[test]
    fn profile_and_link_flags_parse_through_the_model() {
        assert_eq!(profiles("linux:5.10:macos").unwrap()[0].1.name, "macos");
        assert!(profiles("solaris").unwrap_err().to_string().contains("unknown profile 'solaris'"));
        let e = format!("{:#}", profiles("/nonexistent/p.toml").unwrap_err());
        assert!(e.starts_with("--profile: cannot read /nonexistent/p.toml: "), "{e}");
        let e = run_spec(&parse(&["--call-cost", "5"])).unwrap_err().to_string();
        assert_eq!(e, "--call-cost 5: needs a unit (ns, us, ms or s)");
    }
}
