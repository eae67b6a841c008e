//! The process a packet belongs to, as ptcpdump (github.com/mozillazg/ptcpdump) writes it in
//! the packet's pcapng comments.
//!
//! An Enhanced Packet Block may carry `opt_comment` options (pcapng draft, section 3.5: option
//! code 1, a UTF-8 string, repeatable). ptcpdump's writer (internal/writer/pcapng.go) adds one
//! comment per context, each a block of `Key: value` lines:
//!
//! ```text
//! PID: 1234\nCmd: /usr/bin/curl\nArgs: curl kernel.com
//! ThreadId: 1234\nThreadName: curl
//! UserId: 0
//! ParentPID: 53229\nParentCmd: /usr/bin/bash\nParentArgs: -bash
//! ContainerName: web\nContainerId: <id>\nContainerImage: ...\nContainerLabels: {...}
//! PodName: web-0\nPodNamespace: default\nPodUID: ...\nPodLabels: {...}\nPodAnnotations: {...}
//! ```
//!
//! and its reader (internal/types/context.go, `FromPacketComments`) takes every line of every
//! comment, splits it at the first `:`, trims both halves and keeps the keys it knows (`Command`
//! and `TID` as older spellings of `Cmd` and `ThreadId`). [`PacketProcess::parse`] reads the
//! same way. The process is the one whose socket sent or received the packet on the capturing
//! host: the packet's sender when the block's `epb_flags` say outbound or nothing, its receiver
//! when they say inbound (section 4.3.1: bits 0-1, 01 inbound, 10 outbound).

/// What a packet's comments say of its process (the fields tcpstall uses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PacketProcess {
    pub pid: u32,
    /// `Cmd`: the executable's path (`/usr/bin/curl`), as ptcpdump read it.
    pub cmd: String,
    /// `Args`: the command line, space-joined (a trailing `...` when ptcpdump cut it).
    pub args: String,
    /// `ThreadId` and `ThreadName` of the thread that sent, when ptcpdump wrote them.
    pub tid: Option<u32>,
    pub thread_name: Option<String>,
    pub parent_pid: Option<u32>,
    pub container_name: Option<String>,
    pub container_id: Option<String>,
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
}

impl PacketProcess {
    /// The process of a packet from its comments; None when none names a pid (a comment of
    /// another tool, or ptcpdump's without process context: pid 0 is "not known" to it too).
    pub fn parse<'a>(comments: impl IntoIterator<Item = &'a str>) -> Option<PacketProcess> {
        let mut p = PacketProcess::default();
        for line in comments.into_iter().flat_map(|c| c.trim().split('\n')) {
            let Some((key, value)) = line.trim().split_once(':') else { continue };
            let value = value.trim();
            let text = || (!value.is_empty()).then(|| value.to_string());
            match key.trim() {
                "PID" => p.pid = value.parse().unwrap_or(0),
                "ThreadId" | "TID" => p.tid = value.parse().ok().filter(|t| *t > 0),
                "ThreadName" => p.thread_name = text(),
                "ParentPID" => p.parent_pid = value.parse().ok().filter(|t| *t > 0),
                "Cmd" | "Command" => p.cmd = value.to_string(),
                "Args" => p.args = value.to_string(),
                "ContainerName" => p.container_name = text().map(|n| n.trim_start_matches('/').to_string()),
                "ContainerId" => p.container_id = text(),
                "PodName" => p.pod_name = text(),
                "PodNamespace" => p.pod_namespace = text(),
                _ => {}
            }
        }
        (p.pid > 0).then_some(p)
    }

    /// The command's name as ptcpdump shows it (`ProcessBase.Comm`): the base name of `Cmd`,
    /// or of the first argument when `Cmd` is a `/dev/fd/N` (a program run from a descriptor,
    /// as OpenWrt's dropbear is). A cut `Cmd` loses its `...`.
    pub fn comm(&self) -> &str {
        let cmd = self.cmd.strip_suffix("...").unwrap_or(&self.cmd);
        let path = if cmd.starts_with("/dev/fd/") {
            self.args.split(' ').next().filter(|a| !a.is_empty()).unwrap_or(cmd)
        } else {
            cmd
        };
        path.rsplit('/').next().unwrap_or(path)
    }
}

/// The processes of one flow's two endpoints, from its packets' comments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowProcesses {
    /// Endpoint A's (the flow key's `a`) and B's.
    pub a: Option<EndpointProcess>,
    pub b: Option<EndpointProcess>,
}

/// One endpoint's process: the first its packets named, and the other pids they named (a
/// socket shared after a fork, or handed over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointProcess {
    pub process: PacketProcess,
    pub other_pids: Vec<u32>,
}

impl FlowProcesses {
    /// Notes that a packet of the flow named `p` for endpoint `a` (true) or B.
    /// Copies `p` only when it is the endpoint's first (every packet of a ptcpdump capture
    /// names its process).
    pub fn note(&mut self, a: bool, p: &PacketProcess) {
        let slot = if a { &mut self.a } else { &mut self.b };
        match slot {
            None => *slot = Some(EndpointProcess { process: p.clone(), other_pids: Vec::new() }),
            Some(e) if e.process.pid != p.pid && !e.other_pids.contains(&p.pid) => e.other_pids.push(p.pid),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptcpdumps_comments_name_process_container_and_pod() {
        let comments = [
            "PID: 122868\nCmd: /usr/bin/curl\nArgs: curl kernel.com",
            "ThreadId: 122869\nThreadName: curl-worker",
            "ParentPID: 53229\nParentCmd: /usr/bin/bash\nParentArgs: -bash",
            "ContainerName: /web\nContainerId: 3f1c0a9d\nContainerImage: nginx:1\nContainerLabels: {\"a\":\"b:c\"}",
            "PodName: web-0\nPodNamespace: default\nPodUID: u\nPodLabels: {}\nPodAnnotations: {}",
        ];
        let p = PacketProcess::parse(comments).unwrap();
        assert_eq!(
            (p.pid, p.cmd.as_str(), p.args.as_str(), p.comm()),
            (122868, "/usr/bin/curl", "curl kernel.com", "curl")
        );
        assert_eq!((p.tid, p.thread_name.as_deref(), p.parent_pid), (Some(122869), Some("curl-worker"), Some(53229)));
        assert_eq!((p.container_name.as_deref(), p.container_id.as_deref()), (Some("web"), Some("3f1c0a9d")));
        assert_eq!((p.pod_name.as_deref(), p.pod_namespace.as_deref()), (Some("web-0"), Some("default")));
    }

    #[test]
    fn other_comments_and_odd_commands() {
        assert_eq!(PacketProcess::parse(["captured by me", "PID: 0\nCmd: x"]), None);
        let p = PacketProcess::parse(["  Command: /dev/fd/5 \nArgs: /usr/sbin/dropbear -F\nPID:7"]).unwrap();
        assert_eq!((p.pid, p.comm()), (7, "dropbear"));
        let p = PacketProcess::parse(["PID: 8\nCmd: /opt/a-very-long-na...\nArgs: x..."]).unwrap();
        assert_eq!(p.comm(), "a-very-long-na");
    }

    #[test]
    fn a_second_pid_on_one_endpoint_is_a_shared_socket() {
        let p = |pid| PacketProcess { pid, ..Default::default() };
        let mut f = FlowProcesses::default();
        for (a, pid) in [(true, 1), (true, 1), (false, 5), (true, 2), (true, 2)] {
            f.note(a, &p(pid));
        }
        let a = f.a.unwrap();
        assert_eq!((a.process.pid, a.other_pids), (1, vec![2]));
        assert_eq!(f.b.unwrap().process.pid, 5);
    }
}
