//! The owner of a socket, as every command speaks of it: the process (pid and command), its
//! cgroup path and the container id the path holds, and whether another process shares the
//! socket (docs/json-schema.md "Owner"). Pure: the caller reads /proc and the kernel's map.

use serde::{Deserialize, Serialize};

/// Where an owner was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerSource {
    /// The kernel's socket-to-owner map, filled in process context (a write, connect, listen).
    Kernel,
    /// The kernel's map, inherited from the listening socket (accepted, not written on yet).
    Listener,
    /// /proc: a process holding the socket's file descriptor (sockets open before the watch
    /// began, or never written on since).
    Proc,
    /// The capture's packet comments, as ptcpdump writes them (`wire::comment`).
    Capture,
    /// The lab's own process: its threads ran both sides of the row (`tcpstall lab`, advise's
    /// and replay's rows).
    Lab,
}

/// A socket's owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Owner {
    pub pid: u32,
    /// The command (the writing thread's, from the kernel; the process's, from /proc).
    pub comm: String,
    /// The cgroup v2 path (`/system.slice/nginx.service`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The container id the cgroup path holds (64 hex digits: docker, containerd, CRI-O, podman).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The container's name, and the Kubernetes pod (name, namespace) it runs in, when the
    /// capture's comments say (ptcpdump's `ContainerName`, `PodName`, `PodNamespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
    /// Other processes that wrote on the socket or hold its descriptor (a fork, a handed-over
    /// fd); 0 for one the kernel saw write but whose pid it no longer has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<u32>,
    pub source: OwnerSource,
}

impl Owner {
    /// A process's owner from what the caller read of it (/proc, or the kernel's map): its
    /// command and cgroup v2 path, the container id that path holds ([`container_id`]), the
    /// other pids that share the socket; nothing of a container's name or pod (only a capture's
    /// comments say those).
    pub fn of_process(
        pid: u32,
        comm: String,
        cgroup: Option<String>,
        shared_with: Vec<u32>,
        source: OwnerSource,
    ) -> Owner {
        Owner {
            pid,
            comm,
            container: cgroup.as_deref().and_then(container_id),
            container_name: None,
            pod_name: None,
            pod_namespace: None,
            cgroup,
            shared_with,
            source,
        }
    }

    /// The owner of an endpoint whose packets carry ptcpdump's comments: the process, its
    /// container and pod; the other pids its packets named share the socket.
    pub fn from_capture(e: &wire::comment::EndpointProcess) -> Owner {
        let p = &e.process;
        Owner {
            pid: p.pid,
            comm: p.comm().to_string(),
            cgroup: None,
            container: p.container_id.clone(),
            container_name: p.container_name.clone(),
            pod_name: p.pod_name.clone(),
            pod_namespace: p.pod_namespace.clone(),
            shared_with: e.other_pids.clone(),
            source: OwnerSource::Capture,
        }
    }

    /// `comm[pid]`, then the container's name and the pod (`namespace/name`) when known:
    /// `nginx[77] container web, pod shop/web-0`.
    pub fn long(&self) -> String {
        let mut s = self.short();
        if let Some(c) = self.container_name.as_deref().or(self.container.as_deref()) {
            s += &format!(" container {c}");
        }
        if let Some(p) = &self.pod_name {
            let ns = self.pod_namespace.as_deref().map_or(String::new(), |n| format!("{n}/"));
            s += &format!("{}pod {ns}{p}", if s.contains(" container ") { ", " } else { " " });
        }
        s
    }

    /// `comm[pid]` with ` (shared with N)` when shared, for the tables.
    pub fn short(&self) -> String {
        let mut s = format!("{}[{}]", self.comm, self.pid);
        if !self.shared_with.is_empty() {
            s += "+shared";
        }
        s
    }

    /// Whether `--pid`, `--comm` and `--cgroup` all keep this owner (an empty filter keeps all):
    /// the pid is the owner's or one sharing the socket, the command equal, the cgroup path
    /// starting with the one asked (a subtree).
    pub fn matches(&self, f: &OwnerFilter) -> bool {
        (f.pids.is_empty() || f.pids.iter().any(|p| *p == self.pid || self.shared_with.contains(p)))
            && (f.comms.is_empty() || f.comms.contains(&self.comm))
            && (f.cgroups.is_empty() || f.cgroups.iter().any(|c| self.cgroup.as_deref().is_some_and(|g| under(g, c))))
    }
}

/// The owners of a flow's two endpoints, when the capture names them (ptcpdump's packet
/// comments, `wire::comment`): A's and B's (the flow's `a` and `b`). A stall's owner is that of
/// its `held` end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowOwners {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a: Option<Owner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<Owner>,
}

impl FlowOwners {
    /// What the decoder gathered of a flow's packet comments (None: none named a process).
    pub fn from_capture(p: Option<&wire::comment::FlowProcesses>) -> FlowOwners {
        FlowOwners {
            a: p.and_then(|p| p.a.as_ref()).map(Owner::from_capture),
            b: p.and_then(|p| p.b.as_ref()).map(Owner::from_capture),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.a.is_none() && self.b.is_none()
    }
}

/// Whether cgroup path `g` is `c` or below it.
fn under(g: &str, c: &str) -> bool {
    let c = c.trim_end_matches('/');
    g == c || c.is_empty() || g.strip_prefix(c).is_some_and(|rest| rest.starts_with('/'))
}

/// `--pid`, `--comm`, `--cgroup` (each repeatable; empty: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerFilter {
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub cgroups: Vec<String>,
}

impl OwnerFilter {
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty() && self.comms.is_empty() && self.cgroups.is_empty()
    }
}

/// The container id a cgroup path holds: the last path segment with a run of 64 hex digits
/// (`/docker/<id>`, `/system.slice/docker-<id>.scope`, `.../cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `libpod-<id>.scope`), else None.
pub fn container_id(cgroup_path: &str) -> Option<String> {
    cgroup_path.rsplit('/').find_map(|seg| {
        let b = seg.as_bytes();
        (0..b.len().saturating_sub(63)).find_map(|i| {
            let run = &b[i..i + 64];
            let bounded =
                (i == 0 || !b[i - 1].is_ascii_hexdigit()) && b.get(i + 64).is_none_or(|c| !c.is_ascii_hexdigit());
            (bounded && run.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)))
                .then(|| seg[i..i + 64].to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c0a9d2b7e4f6a8c5d1e0b9a7f3c2d4e6f8a0b1c3d5e7f9a2b4c6d8e0f1a3b";

    #[test]
    fn container_ids_from_the_runtimes_cgroup_paths() {
        for p in [
            format!("/docker/{ID}"),
            format!("/system.slice/docker-{ID}.scope"),
            format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope"),
            format!("/machine.slice/libpod-{ID}.scope/container"),
        ] {
            assert_eq!(container_id(&p).as_deref(), Some(ID), "{p}");
        }
        for p in ["/", "/system.slice/nginx.service", "/user.slice/user-0.slice/session-3.scope", &format!("/x/{ID}0")]
        {
            assert_eq!(container_id(p), None, "{p}");
        }
    }

    #[test]
    fn the_filters_keep_pid_command_and_cgroup_subtree() {
        let o = Owner {
            pid: 10,
            comm: "python3".into(),
            cgroup: Some("/tcpstall/a".into()),
            container: None,
            container_name: None,
            pod_name: None,
            pod_namespace: None,
            shared_with: vec![11],
            source: OwnerSource::Kernel,
        };
        let f = |pids: &[u32], comms: &[&str], cgroups: &[&str]| OwnerFilter {
            pids: pids.to_vec(),
            comms: comms.iter().map(|s| s.to_string()).collect(),
            cgroups: cgroups.iter().map(|s| s.to_string()).collect(),
        };
        assert!(o.matches(&OwnerFilter::default()));
        assert!(o.matches(&f(&[11], &[], &[])), "a sharing pid");
        assert!(!o.matches(&f(&[12], &[], &[])));
        assert!(o.matches(&f(&[], &["python3"], &["/tcpstall"])));
        assert!(!o.matches(&f(&[], &["python"], &[])));
        assert!(!o.matches(&f(&[], &[], &["/tcp"])), "a prefix that is not a parent");
        assert_eq!(o.short(), "python3[10]+shared");
    }
}
