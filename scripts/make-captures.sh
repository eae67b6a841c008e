#!/usr/bin/env bash
# Regenerates testdata/captures/*: small tcpdump captures of the seed scenarios on loopback
# (real sockets, real kernel), plus a real program that is not tcpstall (Python's http.client
# posting to http.server). Needs root (tcpdump on lo), python3 and tcpdump.
#
#   scripts/make-captures.sh            # all captures into testdata/captures
#   OUT=/tmp/caps scripts/make-captures.sh
#
# Each capture uses its own port so a stray packet from another capture cannot mix in.
# snaplen 128 keeps the files small: headers (Ethernet 14 + IPv6 40 + TCP 60) all fit; payload
# lengths are taken from the IP header, not from the captured bytes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/../testdata/captures}"
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

capture() { # name port command...   (IFACE=any for Linux cooked v2 headers)
    local name=$1 port=$2; shift 2
    local tmp="$out/.$name.tmp"
    tcpdump -i "${IFACE:-lo}" -s 128 -U --immediate-mode -w "$tmp" "tcp port $port" 2>/dev/null &
    local td=$!
    pids+=("$td")
    sleep 0.5  # let tcpdump open the socket before traffic starts
    CAPTURE_NAME=$name "$@" >/dev/null
    sleep 0.3
    kill -INT "$td"; wait "$td" 2>/dev/null || true
    mv "$tmp" "$out/$name.pcap"
    echo "$name.pcap: $(($(stat -c %s "$out/$name.pcap") / 1024)) KiB"
}

py="python3 $here/seedcap.py"
tcpstall="${TCPSTALL:-$here/../target/debug/tcpstall}"
have_tcpstall=false
if "$tcpstall" lab --help >/dev/null 2>&1; then have_tcpstall=true; fi

# The seed scenarios run by `tcpstall lab` itself (its built-in catalogue, real sockets) on the
# host's loopback (--port keeps it in this namespace so tcpdump sees it). The lab's own report of
# each run is kept beside its capture as NAME.json: crates/analyze/tests/captures.rs checks that
# the analyser's verdict on the capture agrees with the lab's verdict on the same run.
if $have_tcpstall; then
    lab() { "$tcpstall" lab "$@" --format json --quiet --output "$out/$CAPTURE_NAME.json"; }
    capture lab-seed000-default        27200 lab chunked --client none --server none --set round=10 --port 27200
    capture lab-seed000-quickack-once  27201 lab chunked --client quickack-once --server quickack-once --set round=10 --port 27201
    capture lab-seed000-quickack-each  27202 lab chunked --client quickack-each --server quickack-each --set round=10 --port 27202
    capture lab-seed000-msg-more       27203 lab chunked --client msg-more --server msg-more --set round=10 --port 27203
    capture lab-seed001-default        27210 lab multi-write --client none --server none --set requests=10 --set warmup=5 --port 27210
    capture lab-seed001-nodelay-then-cork 27211 lab multi-write --client nodelay-then-cork --server none --set requests=10 --set warmup=5 --port 27211
    capture lab-seed002-default        27220 lab burst --client none --server none --set rounds=10 --set interval_ms=0 --port 27220
    capture lab-seed002-quickack-each  27221 lab burst --client quickack-each --server none --set rounds=10 --set interval_ms=0 --port 27221
else
    echo "skipping the tcpstall lab captures: $tcpstall does not run (TCPSTALL=path/to/tcpstall)" >&2
fi

# The same seeds reproduced by small Python programs (independent of tcpstall's own code).
# seed 000: 1000 B as 100 x 10 B each way, 20 rounds (the first rounds use the 16 quick ACKs).
capture seed000-default 27100 $py 27100 chunked default 20
capture seed000-nodelay 27101 $py 27101 chunked nodelay 3
capture seed000-cork    27102 $py 27102 chunked cork 3
# seed 001: 275, 24, 292 B then a 100 B reply on one connection, 20 requests.
capture seed001-default 27110 $py 27110 multi default 20
capture seed001-nodelay 27111 $py 27111 multi nodelay 20
capture seed001-writev  27112 $py 27112 multi writev 20
# seed 002: N = 3 x 132 B, echoed, read back; 20 rounds.
capture seed002-default 27120 $py 27120 burst default 20
capture seed002-nodelay 27121 $py 27121 burst nodelay 20
# Seed 002's N = 2: Minshall's rule lets the second reply go (no stall on Linux).
N=2 capture seed002-n2  27122 $py 27122 burst default 20
# TCP_CORK set and never cleared: the data waits for the 200 ms cork ceiling.
capture cork-forgotten  27130 $py 27130 corkonly default 3
# A real program: Python http.client POSTs to http.server over a kept-alive connection.
capture http-client-post 27140 python3 "$here/httppost.py" 27140 10
# Format coverage: `tcpdump -i any` (Linux cooked v2) converted to pcapng by editcap.
IFACE=any capture seed001-any 27150 $py 27150 multi default 8
if command -v editcap >/dev/null; then
    editcap -F pcapng "$out/seed001-any.pcap" "$out/seed001-any-sll2.pcapng" && rm "$out/seed001-any.pcap"
    # No handshake: the same connection from its 10th frame on.
    editcap -r "$out/seed001-default.pcap" "$out/seed001-mid-connection.pcap" 10-200
fi

# Over the emulated link (20 ms RTT, MTU 1500), recorded by the link at both ends: each flow
# appears twice, once per interface (client end = capture at A, server end = capture at B).
# Needs root and the tcpstall binary (TCPSTALL=path, default: the workspace's debug build).
link_capture() { # name port kind strategy count   (LINK=spec overrides the link)
    local name=$1 port=$2 kind=$3 strategy=$4 count=$5
    "$tcpstall" shell -q --link "${LINK:-rtt=20ms,mtu=1500}" --capture "$out/$name.pcapng" \
        --server-command "ROLE=server python3 $here/seedcap.py $port $kind $strategy $count" \
        -- sh -c "sleep 0.5; ROLE=client HOST=198.18.0.2 python3 $here/seedcap.py $port $kind $strategy $count"
    echo "$name.pcapng: $(($(stat -c %s "$out/$name.pcapng") / 1024)) KiB"
}
if [ "$(id -u)" = 0 ] && $have_tcpstall; then
    link_capture link20ms-seed001-default 27160 multi default 10
    link_capture link20ms-seed001-nodelay 27161 multi nodelay 10
    # 10 % random loss: retransmissions, some of them hidden from one end (lost before it).
    LINK=rtt=20ms,mtu=1500,loss=10% link_capture link20ms-loss10-seed001-nodelay 27162 multi nodelay 30
else
    echo "skipping the emulated-link captures: needs root and $tcpstall" >&2
fi
