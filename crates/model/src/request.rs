//! What `tcpstall simulate` (and `replay --model`, `advise --model`) asks the model for, as
//! typed, parsed values: the profiles (`--profile`, `--compare-profiles`), the link (`--link`),
//! and the run's options (`--mss`, `--timestamps`, `--call-cost`, `--seed`). Pure: a profile
//! file or `linux:here` (this kernel, measured) is named here and loaded by the caller
//! ([`ProfileSpec::resolve`]), which owns the file system and the kernel experiments.
//!
//! The error messages name the flag a value came from: they are what the user reads.

use std::path::PathBuf;
use std::str::FromStr;

use scenario::LinkSpec;

use crate::{ModelError, Profile, RunSpec};

/// A value of simulate's flags that does not parse or does not fit.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RequestError {
    /// An unknown built-in profile (the message lists the known ones).
    #[error(transparent)]
    Profile(#[from] ModelError),
    #[error("--profile: expected a profile name, all, or CLIENT:SERVER")]
    NoProfile,
    /// The lab's link SPEC did not parse (scenario::LinkSpec's message).
    #[error("--link: {0}")]
    Link(String),
    #[error("--timestamps {0}: expected on or off")]
    Timestamps(String),
    #[error("--mss {0}: expected 88 to 65495 bytes")]
    MssRange(u32),
    /// The MSS plus the 40 bytes of IPv4 and TCP headers must fit the link's MTU.
    #[error("--mss {mss} does not fit the link's MTU {mtu} (at most {max})")]
    MssMtu { mss: u32, mtu: u32, max: u32 },
    /// (`error`, not `source`: the message already says it, a source would repeat it.)
    #[error("--call-cost {value}: {error}")]
    CallCost { value: String, error: scenario::DurationError },
}

/// One side of a `--profile` item: a built-in profile, this kernel as `tcpstall kernel`
/// measures it (`linux:here`), or a profile file (a path ending in `.toml`, the keys of
/// crates/model/profiles/*.toml).
#[derive(Debug, Clone)]
pub enum ProfileRef {
    Builtin(Box<Profile>),
    Here,
    File(PathBuf),
}

impl ProfileRef {
    /// The side `name` names, if it names one. Era names contain a colon (`linux:5.10`).
    fn named(name: &str) -> Option<ProfileRef> {
        if name == "linux:here" {
            return Some(ProfileRef::Here);
        }
        if name.ends_with(".toml") {
            return Some(ProfileRef::File(PathBuf::from(name)));
        }
        Profile::builtin(name).ok().map(|p| ProfileRef::Builtin(Box::new(p)))
    }
}

/// `--profile`: `all` (the six stacks, each on both sides), or comma-separated items, each one
/// profile on both sides or a CLIENT:SERVER pair.
#[derive(Debug, Clone)]
pub enum ProfileSpec {
    All,
    Pairs(Vec<(ProfileRef, ProfileRef)>),
}

impl FromStr for ProfileSpec {
    type Err = RequestError;

    /// An item that names one profile is that profile on both sides; otherwise it is split at
    /// the first colon that leaves a profile on each side (`linux:5.10:macos`).
    fn from_str(spec: &str) -> Result<Self, RequestError> {
        if spec == "all" {
            return Ok(ProfileSpec::All);
        }
        let mut out = Vec::new();
        for one in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if let Some(p) = ProfileRef::named(one) {
                out.push((p.clone(), p));
                continue;
            }
            let split = one
                .match_indices(':')
                .find_map(|(i, _)| Some((ProfileRef::named(&one[..i])?, ProfileRef::named(&one[i + 1..])?)));
            match split {
                Some(pair) => out.push(pair),
                // No split works: the error of the first half if it names nothing, else the whole.
                None => {
                    let first = one.split(':').next().unwrap_or(one);
                    if ProfileRef::named(first).is_none() {
                        Profile::builtin(first)?;
                    }
                    Profile::builtin(one)?;
                }
            }
        }
        if out.is_empty() {
            return Err(RequestError::NoProfile);
        }
        Ok(ProfileSpec::Pairs(out))
    }
}

impl ProfileSpec {
    /// `--compare-profiles LIST`: `eras` (the default) is every Linux era, oldest first.
    pub fn compare_list(list: &str) -> Result<ProfileSpec, RequestError> {
        if list == "eras" {
            Profile::era_names().join(",").parse()
        } else {
            list.parse()
        }
    }

    /// The (client, server) pairs, `load` giving the profile of `linux:here` and of files
    /// (called once per side that needs it, in order; the caller may cache).
    pub fn resolve<E>(
        &self,
        mut load: impl FnMut(&ProfileRef) -> Result<Profile, E>,
    ) -> Result<Vec<(Profile, Profile)>, E> {
        let pairs = match self {
            ProfileSpec::All => return Ok(Profile::all().into_iter().map(|p| (p.clone(), p)).collect()),
            ProfileSpec::Pairs(p) => p,
        };
        let mut side = |r: &ProfileRef| match r {
            ProfileRef::Builtin(p) => Ok(Profile::clone(p)),
            other => load(other),
        };
        pairs.iter().map(|(c, s)| Ok((side(c)?, side(s)?))).collect()
    }
}

/// A profile file of `--profile` that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadProfileError {
    #[error("--profile: cannot read {file}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The file's text is not a profile, or `linux:here` has no base profile.
    #[error(transparent)]
    Profile(#[from] ModelError),
}

impl ProfileSpec {
    /// [`ProfileSpec::resolve`] with a profile file's text from `read` and `linux:here` from
    /// `here` (measured once, however many sides name it).
    pub fn load(
        &self,
        read: impl Fn(&std::path::Path) -> std::io::Result<String>,
        mut here: impl FnMut() -> Result<Profile, ModelError>,
    ) -> Result<Vec<(Profile, Profile)>, LoadProfileError> {
        let mut measured: Option<Profile> = None;
        self.resolve(|r| match r {
            ProfileRef::Builtin(p) => Ok(Profile::clone(p)),
            ProfileRef::Here => {
                if let Some(p) = &measured {
                    return Ok(p.clone());
                }
                let p = here()?;
                measured = Some(p.clone());
                Ok(p)
            }
            ProfileRef::File(path) => {
                let file = path.display().to_string();
                let text = read(path).map_err(|source| LoadProfileError::Read { file: file.clone(), source })?;
                Ok(Profile::from_toml(&file, &text)?)
            }
        })
    }
}

/// `--link`: the modelled link and how the report names it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRequest {
    pub link: LinkSpec,
    pub label: String,
}

impl LinkRequest {
    /// The lab's SPEC (`rtt=20ms,rate=100mbit,...`), or the lab's loopback without one: MTU
    /// 1500 in its private namespace, the rate standing for the copy cost of the loopback path
    /// (a stream would otherwise be infinitely fast). A SPEC without rtt/delay keys keeps
    /// loopback's delay, and without a rate loopback's rate.
    pub fn parse(spec: Option<&str>) -> Result<LinkRequest, RequestError> {
        let mut lo = LinkSpec { mtu: 1500, ..crate::loopback_link() };
        let Some(spec) = spec else {
            return Ok(LinkRequest { label: format!("loopback (model: {lo})"), link: lo });
        };
        let l: LinkSpec = spec.parse().map_err(|e: scenario::LinkSpecError| RequestError::Link(e.to_string()))?;
        if spec.contains("rtt") || spec.contains("delay") {
            return Ok(LinkRequest { link: l, label: spec.to_string() });
        }
        let (up, down, rate) = (lo.delay_up_ns, lo.delay_down_ns, lo.rate_bps);
        lo = l;
        lo.delay_up_ns = up;
        lo.delay_down_ns = down;
        lo.rate_bps = lo.rate_bps.or(rate);
        Ok(LinkRequest { label: format!("{lo}"), link: lo })
    }
}

/// Longest `--call-cost`: one call taking longer would be a stall of its own.
pub const MAX_CALL_COST_NS: u64 = 10_000_000;

/// `--call-cost`: the time one application call takes, a duration with a unit (ns, us, ms or
/// s; bare `0` too), at most [`MAX_CALL_COST_NS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallCost(pub u64);

impl FromStr for CallCost {
    type Err = RequestError;
    fn from_str(v: &str) -> Result<Self, RequestError> {
        let v = v.trim();
        if v == "0" {
            return Ok(CallCost(0));
        }
        scenario::parse_duration_ns(v, MAX_CALL_COST_NS)
            .map(CallCost)
            .map_err(|error| RequestError::CallCost { value: v.to_string(), error })
    }
}

/// `--timestamps`: on or off (1/0, yes/no, true/false too).
pub fn parse_timestamps(v: &str) -> Result<bool, RequestError> {
    match v {
        "on" | "1" | "yes" | "true" => Ok(true),
        "off" | "0" | "no" | "false" => Ok(false),
        o => Err(RequestError::Timestamps(o.to_string())),
    }
}

/// Smallest and largest `--mss`: Linux's TCP_MIN_MSS (88, include/net/tcp.h), and the largest
/// segment a 65535-byte IPv4 packet carries (65535 - 40 bytes of headers).
const MSS_RANGE: std::ops::RangeInclusive<u32> = 88..=65495;

/// A run's options besides the profiles, checked against each other.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub link: LinkRequest,
    pub mss: Option<u32>,
    pub timestamps: Option<bool>,
    pub call: CallCost,
    pub seed: u64,
}

impl RunRequest {
    /// Parse in the flags' order (link, timestamps, MSS, call cost): the first bad one is the
    /// error.
    pub fn parse(
        link: Option<&str>,
        mss: Option<u32>,
        timestamps: Option<&str>,
        call_cost: &str,
        seed: u64,
    ) -> Result<RunRequest, RequestError> {
        let link = LinkRequest::parse(link)?;
        let timestamps = timestamps.map(parse_timestamps).transpose()?;
        if let Some(m) = mss {
            if !MSS_RANGE.contains(&m) {
                return Err(RequestError::MssRange(m));
            }
            // 20 bytes of IPv4 header and 20 of TCP header (RFC 9293 3.7.1: MSS = MTU - 40).
            if m + 40 > link.link.mtu {
                let mtu = link.link.mtu;
                return Err(RequestError::MssMtu { mss: m, mtu, max: mtu.saturating_sub(40) });
            }
        }
        Ok(RunRequest { link, mss, timestamps, call: call_cost.parse()?, seed })
    }

    /// The flags' defaults behind `link` (`replay --model`, `advise --model`): the profiles'
    /// MSS and timestamps, a call cost of 2 us, seed 1.
    pub fn with_link(link: Option<&str>) -> Result<RunRequest, RequestError> {
        RunRequest::parse(link, None, None, "2us", 1)
    }

    /// `--compare-profiles`: the scenario's strategy pairs on each profile pair, one column
    /// each, named by the profile (`CLIENT:SERVER` when the two differ).
    pub fn compare(&self, s: &scenario::Scenario, pairs: Vec<(Profile, Profile)>) -> Vec<(String, report::Report)> {
        pairs
            .into_iter()
            .map(|(c, sv)| {
                let label = if c.name == sv.name { c.name.clone() } else { format!("{}:{}", c.name, sv.name) };
                (label, crate::report(s, &s.matrix, &self.spec(vec![(c, sv)]), false).0)
            })
            .collect()
    }

    /// The model's run for these profile pairs.
    pub fn spec(&self, profiles: Vec<(Profile, Profile)>) -> RunSpec {
        RunSpec {
            profiles,
            link: self.link.link.clone(),
            link_label: self.link.label.clone(),
            seed: self.seed,
            mss: self.mss,
            timestamps: self.timestamps,
            call_ns: self.call.0,
        }
    }
}

impl RunSpec {
    /// One run of the scenario's strategy pairs, with the first row's packets when `keep`
    /// (else none): what `advise --model` runs per repetition and `replay --model` shows.
    pub fn run_first(&self, s: &scenario::Scenario, keep: bool) -> (report::Report, Vec<trace::Event>) {
        let (r, mut out) = crate::report(s, &s.matrix, self, keep);
        let trace = if keep && !out.is_empty() { out.swap_remove(0).trace } else { Vec::new() };
        (r, trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(spec: &str) -> Vec<(String, String)> {
        let s: ProfileSpec = spec.parse().unwrap();
        let no_load = |r: &ProfileRef| -> Result<Profile, String> { Err(format!("{r:?}")) };
        s.resolve(no_load).unwrap().into_iter().map(|(c, s)| (c.name, s.name)).collect()
    }

    fn pair(c: &str, s: &str) -> (String, String) {
        (c.to_string(), s.to_string())
    }

    #[test]
    fn profile_specs() {
        assert_eq!(names("all").len(), 6);
        assert_eq!(names("linux:macos"), [pair("linux", "macos")]);
        let e = "solaris".parse::<ProfileSpec>().unwrap_err().to_string();
        assert!(e.starts_with("unknown profile 'solaris' (known: linux, "), "{e}");
        // Era names contain a colon: a whole name first, then CLIENT:SERVER splits.
        assert_eq!(names("linux:5.10"), [pair("linux:5.10", "linux:5.10")]);
        assert_eq!(names("linux:5.10:macos"), [pair("linux:5.10", "macos")]);
        assert_eq!(names("macos:linux:6.1"), [pair("macos", "linux:6.1")]);
        assert_eq!(names("linux, freebsd"), [pair("linux", "linux"), pair("freebsd", "freebsd")]);
        let e = "linux:9.9".parse::<ProfileSpec>().unwrap_err().to_string();
        assert!(e.starts_with("unknown profile 'linux:9.9'"), "{e}");
        let e = "solaris:linux".parse::<ProfileSpec>().unwrap_err().to_string();
        assert!(e.starts_with("unknown profile 'solaris'"), "the half that names nothing: {e}");
        assert_eq!(" , ".parse::<ProfileSpec>().unwrap_err(), RequestError::NoProfile);
    }

    #[test]
    fn here_and_files_are_loaded_by_the_caller() {
        // A name ending in .toml is a file as a whole (as before splitting at colons).
        let s: ProfileSpec = "linux:here:macos,my.toml".parse().unwrap();
        let mut asked = Vec::new();
        let got = s.resolve(|r| -> Result<Profile, ()> {
            asked.push(format!("{r:?}"));
            Ok(Profile::builtin("macos").unwrap())
        });
        assert_eq!(got.unwrap().len(), 2);
        assert_eq!(asked, ["Here", "File(\"my.toml\")", "File(\"my.toml\")"]);
        assert_eq!(ProfileSpec::compare_list("eras").unwrap().resolve(|_| Err(())).unwrap().len(), 8);
    }

    #[test]
    fn load_reads_files_and_measures_here_once() {
        let s: ProfileSpec = "linux:here,linux:here:macos".parse().unwrap();
        let mut measured = 0;
        let no_file = |_: &std::path::Path| -> std::io::Result<String> { Err(std::io::ErrorKind::NotFound.into()) };
        let got = s.load(no_file, || {
            measured += 1;
            Profile::builtin("freebsd")
        });
        assert_eq!(got.unwrap()[1], (Profile::builtin("freebsd").unwrap(), Profile::builtin("macos").unwrap()));
        assert_eq!(measured, 1);
        let e = "/nonexistent/p.toml".parse::<ProfileSpec>().unwrap().load(no_file, || Profile::builtin("linux"));
        assert_eq!(e.unwrap_err().to_string(), "--profile: cannot read /nonexistent/p.toml");
        let text = |_: &std::path::Path| Ok("name = \"x\"\n".to_string());
        let e = "p.toml".parse::<ProfileSpec>().unwrap().load(text, || Profile::builtin("linux"));
        assert!(matches!(e, Err(LoadProfileError::Profile(_))), "{e:?}");
        let spec = RunRequest::with_link(Some("rtt=20ms")).unwrap().spec(Vec::new());
        assert_eq!((spec.call_ns, spec.seed, spec.mss, spec.link.delay_up_ns), (2_000, 1, None, 10_000_000));
    }

    #[test]
    fn compare_names_each_column_by_its_profiles() {
        let s = scenario::Scenario::builtin("burst").unwrap();
        let pairs = "linux,linux:macos".parse::<ProfileSpec>().unwrap().resolve(|_| Err(())).unwrap();
        let cols = RunRequest::with_link(None).unwrap().compare(&s, pairs);
        let labels: Vec<_> = cols.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["linux", "linux:macos"]);
        assert_eq!(cols[1].1.results.len(), s.matrix.len());
        let spec = RunRequest::with_link(None)
            .unwrap()
            .spec(vec![(Profile::builtin("linux").unwrap(), Profile::builtin("linux").unwrap())]);
        let (r, packets) = spec.run_first(&s, true);
        assert_eq!(r.results.len(), s.matrix.len());
        assert!(!packets.is_empty());
        assert!(spec.run_first(&s, false).1.is_empty());
    }

    #[test]
    fn call_cost_is_a_duration_up_to_10ms() {
        let c = |v: &str| v.parse::<CallCost>();
        assert_eq!(c("2us").unwrap(), CallCost(2_000));
        assert_eq!(c(" 0 ").unwrap(), CallCost(0));
        assert_eq!(c("10ms").unwrap(), CallCost(10_000_000));
        assert!(c("5").unwrap_err().to_string().starts_with("--call-cost 5: needs a unit"));
        assert!(c("11ms").unwrap_err().to_string().contains("out of range (0 to 10 ms)"));
        assert!(c("-1us").is_err());
    }

    #[test]
    fn link_without_delay_keeps_loopback_delay() {
        let l = LinkRequest::parse(Some("mtu=9000")).unwrap().link;
        assert_eq!(l.mtu, 9000);
        assert!(l.delay_up_ns > 0);
        assert_eq!(LinkRequest::parse(Some("rtt=20ms")).unwrap().link.delay_up_ns, 10_000_000);
        assert!(LinkRequest::parse(Some("bogus=1")).unwrap_err().to_string().starts_with("--link: "));
        let lo = LinkRequest::parse(None).unwrap();
        assert_eq!(lo.link.mtu, 1500);
        assert!(lo.label.starts_with("loopback (model: "), "{}", lo.label);
    }

    /// RFC 9293 3.7.1: the MSS leaves 40 bytes of headers in the MTU; Linux's floor is
    /// TCP_MIN_MSS (88).
    #[test]
    fn run_options_are_checked_in_flag_order() {
        let r = |link, mss, ts, cc| RunRequest::parse(link, mss, ts, cc, 1).map_err(|e| e.to_string());
        assert_eq!(r(None, Some(1460), Some("off"), "0").unwrap().timestamps, Some(false));
        assert_eq!(
            r(None, Some(1461), None, "2us").unwrap_err(),
            "--mss 1461 does not fit the link's MTU 1500 (at most 1460)"
        );
        assert_eq!(r(None, Some(87), None, "2us").unwrap_err(), "--mss 87: expected 88 to 65495 bytes");
        assert_eq!(r(None, Some(87), Some("maybe"), "x").unwrap_err(), "--timestamps maybe: expected on or off");
        assert_eq!(r(Some("mtu=9000"), Some(8960), None, "1ms").unwrap().call, CallCost(1_000_000));
        let spec = r(None, None, None, "2us").unwrap().spec(Vec::new());
        assert_eq!((spec.call_ns, spec.seed, spec.link.mtu), (2_000, 1, 1500));
    }
}
