//! The proxies whose own configuration turns the hold off, for the deployable form of a
//! TCP_NODELAY fix on a side that runs one. Which program a side runs is read from its command's
//! executable (or named by the user, for a wrapper script or a container), never guessed from
//! the stall. Pure.
//!
//! - HAProxy: `option http-no-delay` (HAProxy configuration manual, 4 "Proxies", option
//!   http-no-delay; sections defaults, frontend, listen, backend): HAProxy's own hold is its
//!   aggregation with MSG_MORE (held by the kernel as TCP_CORK would hold it), which the option
//!   turns off. ray-project/ray #61468: time to first token 356.8 -> 120.9 ms with it.
//! - nginx: `tcp_nodelay on;` (ngx_http_core_module, contexts http, server, location; and
//!   ngx_stream_core_module for TCP proxying). On by default, but nginx sets TCP_NODELAY only
//!   when a connection goes keep-alive, on SSL connections, for unbuffered proxying and for
//!   WebSocket proxying (the directive's documentation): writes before that go with Nagle on.

/// A proxy tcpstall knows the setting of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    Haproxy,
    Nginx,
}

impl Proxy {
    /// A program's file name as a proxy (`haproxy`, `nginx`, and variants such as
    /// `nginx-debug` or `haproxy2.8`).
    pub fn of_name(name: &str) -> Option<Proxy> {
        let n = name.to_ascii_lowercase();
        if n.starts_with("haproxy") {
            Some(Proxy::Haproxy)
        } else if n.starts_with("nginx") {
            Some(Proxy::Nginx)
        } else {
            None
        }
    }

    /// The configuration line(s), where they go, and what they do.
    pub fn lines(self) -> &'static str {
        match self {
            Proxy::Haproxy => {
                "HAProxy's own setting, in the frontend, backend or defaults section (mode http):\n  \
                 option http-no-delay\n\
                 It turns off HAProxy's aggregation with MSG_MORE, its own hold (HAProxy \
                 configuration manual, option http-no-delay).\n"
            }
            Proxy::Nginx => {
                "nginx's own setting, in the http, server or location block (or stream, for TCP proxying):\n  \
                 tcp_nodelay on;\n\
                 It is nginx's default, but nginx sets TCP_NODELAY only once a connection goes \
                 keep-alive, on SSL connections, for unbuffered proxying and for WebSocket \
                 proxying (ngx_http_core_module, tcp_nodelay): check it is not turned off; writes \
                 before those points still go with Nagle on, which only the fix above changes.\n"
            }
        }
    }
}

/// The file name of the executable a shell command starts: its first word after `VAR=value`
/// assignments and `env`/`exec` (as [`crate::shim::command_program`] reads it).
pub fn command_name(command: &str) -> Option<&str> {
    let word =
        command.split_whitespace().find(|w| (w.starts_with('/') || !w.contains('=')) && *w != "env" && *w != "exec")?;
    word.rsplit('/').next()
}

/// The proxy line for a side whose command is `command`, or whose `program` is known (its
/// name and how it is known: named by the user, the process listening); else the sentence
/// saying why there is none.
pub fn note(side: &str, command: &str, program: Option<(&str, &str)>) -> String {
    let (name, how) = match program {
        Some((n, how)) => (Some(n), how),
        None => (command_name(command), "the command's executable"),
    };
    match name.and_then(Proxy::of_name) {
        Some(p) => format!(
            "{}Not measured here: --{side}-setting 'line:<its config file>:<the line>' measures it on the program itself. \
             The fix above reaches every program in the {side}'s cgroup (a backend it starts too), the line only the proxy's own sockets.\n",
            p.lines()
        ),
        None => format!(
            "No proxy line: the {side} runs `{}` ({how}), not haproxy or nginx; --{side}-program names the program a wrapper or a container hides.\n",
            name.unwrap_or("?")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executable_names_the_proxy() {
        assert_eq!(command_name("/usr/sbin/nginx -c /tmp/n.conf"), Some("nginx"));
        assert_eq!(command_name("FOO=1 exec haproxy -f h.cfg"), Some("haproxy"));
        assert_eq!(Proxy::of_name("nginx-debug"), Some(Proxy::Nginx));
        assert_eq!(Proxy::of_name("python3"), None);
    }

    /// HAProxy: option http-no-delay; nginx: tcp_nodelay on (their manuals, module doc).
    #[test]
    fn each_proxy_prints_its_line_and_others_say_why_not() {
        assert!(note("server", "haproxy -f /etc/haproxy.cfg", None).contains("  option http-no-delay\n"));
        assert!(note("server", "nginx -g 'daemon off;'", None).contains("  tcp_nodelay on;\n"));
        assert!(note("server", "sh run.sh", Some(("nginx", "named"))).contains("tcp_nodelay on;"));
        let n = note("client", "python3 c.py", None);
        assert!(n.starts_with("No proxy line: the client runs `python3` (the command's executable)"), "{n}");
        assert!(n.contains("--client-program"), "{n}");
    }
}
