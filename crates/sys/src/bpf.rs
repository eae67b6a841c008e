//! Classic BPF (Documentation/networking/filter.rst) for the lab's packet capture: a program,
//! built as data, that keeps the TCP packets to or from given ports on Ethernet framing (which
//! `lo` uses: ARPHRD_LOOPBACK with a zeroed 14-byte Ethernet header, drivers/net/loopback.c),
//! and a tiny pure interpreter so the program is tested on crafted frames without a kernel.
//!
//! The program is the one `tcpdump -dd 'tcp and port N'` prints (libpcap's gencode), with two
//! changes: any number of ports, and an optional first test that drops outgoing copies
//! (`inbound`, ancillary load of `skb->pkt_type`, SKF_AD_PKTTYPE): on loopback every packet
//! passes the taps twice, once leaving (`dev_queue_xmit_nit`, PACKET_OUTGOING) and once
//! arriving (`__netif_receive_skb`, PACKET_HOST), and libpcap skips the outgoing copy on lo
//! (pcap-linux.c, `linux_check_direction`). Dropping it in the filter saves the kernel the copy
//! (`packet_rcv` runs the filter before it clones the skb, net/packet/af_packet.c).
//! The accept return value is the snap length: `packet_rcv` trims the copy to it.
//! Like tcpdump's, the IPv6 test needs TCP as the first next-header (no extension headers).

/// One instruction, the layout of `struct sock_filter` (include/uapi/linux/filter.h).
pub type Insn = libc::sock_filter;

// Opcode parts (include/uapi/linux/bpf_common.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MSH: u16 = 0xa0;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JSET: u16 = 0x40;
const K: u16 = 0x00;

/// Ancillary data offsets (include/uapi/linux/filter.h): loads at `SKF_AD_OFF + x` read skb
/// fields instead of packet bytes (`bpf_anc_helper`/`convert_bpf_extensions`, net/core/filter.c).
const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
const SKF_AD_PKTTYPE: u32 = 4;
const SKF_AD_IFINDEX: u32 = 8;
const ALU: u16 = 0x04;
const AND: u16 = 0x50;
/// `PACKET_OUTGOING` (include/uapi/linux/if_packet.h).
pub const PACKET_OUTGOING: u32 = 4;

const ETHERTYPE_IP: u32 = 0x0800;
const ETHERTYPE_IPV6: u32 = 0x86dd;
const IPPROTO_TCP: u32 = 6;

fn stmt(code: u16, k: u32) -> Insn {
    Insn { code, jt: 0, jf: 0, k }
}

/// A jump whose targets are labels, resolved by `Builder::finish`.
enum Slot {
    Insn(Insn),
    Jump {
        code: u16,
        k: u32,
        jt: Label,
        jf: Label,
    },
    /// A `ret #snaplen` (accept) or `ret #0` (reject) in the middle of the program, jumped over
    /// by the straight path (see `Builder::landing`).
    Pad {
        accept: bool,
    },
    /// `ja` to an instruction any distance ahead (its offset is 32 bits), patched once known.
    Far(usize),
}

/// Conditional jumps reach at most 255 instructions ahead (their offsets are 8 bits,
/// `bpf_check_classic`): a landing (`ja +2; ret #snaplen; ret #0`) every this many port tests
/// keeps Accept and Reject within reach for any number of ports (`ja` takes 32 bits).
const LANDING_EVERY: usize = 64;
/// Port lists longer than this put the IPv6 test out of a conditional jump's reach from the
/// IPv4 test: a `ja` bridges it. (BPF_MAXINSNS, 4096, bounds the list at about 1000 ports:
/// the kernel refuses a longer filter, which the caller reports.)
const FAR_PORTS: usize = 40;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Next,
    /// The instruction after the next (over a `Far` jump).
    Skip,
    Accept,
    Reject,
    /// The instruction with this index.
    At(usize),
}

struct Builder(Vec<Slot>);

impl Builder {
    fn op(&mut self, i: Insn) -> usize {
        self.0.push(Slot::Insn(i));
        self.0.len() - 1
    }
    fn jeq(&mut self, k: u32, jt: Label, jf: Label) -> usize {
        self.0.push(Slot::Jump { code: JMP | JEQ | K, k, jt, jf });
        self.0.len() - 1
    }
    fn jset(&mut self, k: u32, jt: Label, jf: Label) -> usize {
        self.0.push(Slot::Jump { code: JMP | JSET | K, k, jt, jf });
        self.0.len() - 1
    }
    /// `ja +2; ret #snaplen; ret #0`: an accept and a reject the jumps before them can reach,
    /// skipped by the straight path.
    fn landing(&mut self) {
        self.op(stmt(JMP | JA | K, 2));
        self.0.push(Slot::Pad { accept: true });
        self.0.push(Slot::Pad { accept: false });
    }

    /// Appends `ret #snaplen; ret #0` and resolves the labels into the relative offsets classic
    /// BPF uses (forward only, 0..=255: `bpf_check_classic`, net/core/filter.c): Accept and
    /// Reject go to the nearest landing ahead (see [`LANDING_EVERY`]).
    fn finish(mut self, snaplen: u32) -> Vec<Insn> {
        self.0.push(Slot::Pad { accept: true });
        self.0.push(Slot::Pad { accept: false });
        let n = self.0.len();
        let next_pad = |from: usize, accept: bool| {
            (from..n).find(|&j| matches!(self.0[j], Slot::Pad { accept: a } if a == accept)).unwrap_or(n - 1)
        };
        (0..n)
            .map(|i| match &self.0[i] {
                Slot::Insn(x) => *x,
                Slot::Pad { accept } => stmt(RET | K, if *accept { snaplen } else { 0 }),
                Slot::Far(t) => stmt(JMP | JA | K, u32::try_from(t.saturating_sub(i + 1)).unwrap_or(u32::MAX)),
                Slot::Jump { code, k, jt, jf } => {
                    let to = |l: Label| {
                        let target = match l {
                            Label::Next => i + 1,
                            Label::Skip => i + 2,
                            Label::Accept => next_pad(i + 1, true),
                            Label::Reject => next_pad(i + 1, false),
                            Label::At(t) => t,
                        };
                        // Landings keep every target within reach; saturating keeps a bad label
                        // from wrapping into an out-of-program jump (the kernel would refuse it).
                        u8::try_from(target.saturating_sub(i + 1)).unwrap_or(u8::MAX)
                    };
                    Insn { code: *code, jt: to(*jt), jf: to(*jf), k: *k }
                }
            })
            .collect()
    }
}

/// The filter: TCP over IPv4 or IPv6 on Ethernet framing with source or destination port in
/// `ports`, accepted with `snaplen` bytes; `skip_outgoing` first drops PACKET_OUTGOING copies.
/// Each instruction is commented with its tcpdump -d form.
pub fn tcp_ports(ports: &[u16], snaplen: u32, skip_outgoing: bool) -> Vec<Insn> {
    let mut b = Builder(Vec::new());
    // The IPv4 test's false branch goes to the IPv6 test, whose index depends on the port
    // count: patched below once known.
    if skip_outgoing {
        b.op(stmt(LD | H | ABS, SKF_AD_OFF + SKF_AD_PKTTYPE)); // ldh [type]
        b.jeq(PACKET_OUTGOING, Label::Reject, Label::Next); //     jeq #4 (outgoing) -> reject
    }
    b.op(stmt(LD | H | ABS, 12)); //                              ldh [12]: ethertype
                                  // Up to FAR_PORTS ports the IPv6 test is within a conditional jump's reach (tcpdump's own
                                  // program for one port); beyond, the false branch goes through a `ja`.
    let far = ports.len() > FAR_PORTS;
    let v4_test = b.jeq(ETHERTYPE_IP, if far { Label::Skip } else { Label::Next }, Label::Next); // jeq #0x800
    if far {
        b.0.push(Slot::Far(0)); //                                ja IPv6 test (any distance)
    }
    b.op(stmt(LD | B | ABS, 14 + 9)); //                          ldb [23]: IPv4 protocol
    b.jeq(IPPROTO_TCP, Label::Next, Label::Reject); //            jeq #6
    b.op(stmt(LD | H | ABS, 14 + 6)); //                          ldh [20]: flags + fragment offset
    b.jset(0x1fff, Label::Reject, Label::Next); //                jset #0x1fff: not first fragment
    b.op(stmt(LDX | B | MSH, 14)); //                             ldxb 4*([14]&0xf): IPv4 header length
    port_tests(&mut b, ports, IND, 14); //                       ldh [x + 14] / [x + 16]: ports
    let v6 = b.jeq(ETHERTYPE_IPV6, Label::Next, Label::Reject); // jeq #0x86dd
    b.op(stmt(LD | B | ABS, 14 + 6)); //                          ldb [20]: IPv6 next header
    b.jeq(IPPROTO_TCP, Label::Next, Label::Reject); //            jeq #6
    port_tests(&mut b, ports, ABS, 14 + 40); //                  ldh [54] / [56]: ports
    if far {
        b.0[v4_test + 1] = Slot::Far(v6);
    } else if let Slot::Jump { jf, .. } = &mut b.0[v4_test] {
        *jf = Label::At(v6);
    }
    b.finish(snaplen)
}

/// Source then destination port against each of `ports`: any match accepts; the last miss falls
/// through to the next instruction (IPv4: on to the IPv6 test, which fails; IPv6: reject).
/// `mode` is IND (offset from X, IPv4's variable header) or ABS; `base` is where TCP starts.
fn port_tests(b: &mut Builder, ports: &[u16], mode: u16, base: u32) {
    let last_block = 2 * ports.len();
    let mut k = 0;
    for off in [0u32, 2] {
        b.op(stmt(LD | H | mode, base + off)); // ldh [x + base + off] or [base + off]: a port
        for &p in ports {
            k += 1;
            let miss = if k == last_block { Label::Reject } else { Label::Next };
            b.jeq(u32::from(p), Label::Accept, miss); // jeq #port -> accept
            if k % LANDING_EVERY == 0 && k != last_block {
                b.landing(); //                                           ja +2; ret #snaplen; ret #0
            }
        }
    }
}

/// The filter of `tcpstall watch`'s cooked (SOCK_DGRAM) capture, where every packet starts at
/// its network header (`packet_rcv` pulls the link header for SOCK_DGRAM before the filter
/// runs, net/packet/af_packet.c): TCP over IPv4 (first fragments only) or IPv6 (TCP as the
/// first next header, as tcpdump's), with a source or destination address in `hosts` (any when
/// empty) and a source or destination port in `ports` (any when empty), accepted with `snaplen`
/// bytes. `skip_outgoing_on`: an interface (loopback) whose outgoing copies are dropped, as
/// every packet crosses it twice (see [`tcp_ports`]).
pub fn tcp_l3(ports: &[u16], hosts: &[std::net::IpAddr], snaplen: u32, skip_outgoing_on: Option<u32>) -> Vec<Insn> {
    let v4_hosts: Vec<u32> = hosts
        .iter()
        .filter_map(|h| match h {
            std::net::IpAddr::V4(a) => Some(u32::from(*a)),
            _ => None,
        })
        .collect();
    let v6_hosts: Vec<[u32; 4]> = hosts
        .iter()
        .filter_map(|h| match h {
            std::net::IpAddr::V6(a) => {
                let o = a.octets();
                Some([0, 4, 8, 12].map(|i| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]])))
            }
            _ => None,
        })
        .collect();
    let mut b = Builder(Vec::new());
    if let Some(lo) = skip_outgoing_on {
        b.op(stmt(LD | H | ABS, SKF_AD_OFF + SKF_AD_PKTTYPE)); // ldh [type]
        let out = b.jeq(PACKET_OUTGOING, Label::Next, Label::Next); // jeq #4 (outgoing)
        b.op(stmt(LD | W | ABS, SKF_AD_OFF + SKF_AD_IFINDEX)); // ld [ifindex]
        b.jeq(lo, Label::Reject, Label::Next); //                    jeq #lo -> reject
        let version = b.0.len();
        if let Slot::Jump { jf, .. } = &mut b.0[out] {
            *jf = Label::At(version);
        }
    }
    b.op(stmt(LD | B | ABS, 0)); //                                  ldb [0]: version
    b.op(stmt(ALU | AND | K, 0xf0)); //                              and #0xf0
    let far = ports.len() > FAR_PORTS;
    let is_v4 = b.jeq(0x40, if far { Label::Skip } else { Label::Next }, Label::Next); // jeq #0x40, jf -> IPv6
    if far {
        b.0.push(Slot::Far(0)); //                                   ja IPv6 (any distance)
    }
    // IPv4 hosts (both lists empty of v4 while v6 hosts are asked: no IPv4 packet matches).
    b.op(stmt(LD | B | ABS, 9)); //                                  ldb [9]: protocol
    b.jeq(IPPROTO_TCP, Label::Next, Label::Reject);
    b.op(stmt(LD | H | ABS, 6)); //                                  ldh [6]: flags + offset
    b.jset(0x1fff, Label::Reject, Label::Next);
    if !hosts.is_empty() {
        if v4_hosts.is_empty() {
            b.op(stmt(RET | K, 0));
        } else {
            host_tests(&mut b, &v4_hosts.iter().map(|h| [*h]).collect::<Vec<_>>(), 12, 16);
        }
    }
    b.op(stmt(LDX | B | MSH, 0)); //                                 ldxb 4*([0]&0xf)
    if ports.is_empty() {
        b.op(stmt(RET | K, snaplen));
    } else {
        port_tests(&mut b, ports, IND, 0);
        // port_tests falls through on its last miss: reject.
        b.op(stmt(RET | K, 0));
    }
    let v6 = b.jeq(0x60, Label::Next, Label::Reject); //             jeq #0x60
    if far {
        b.0[is_v4 + 1] = Slot::Far(v6);
    } else if let Slot::Jump { jf, .. } = &mut b.0[is_v4] {
        *jf = Label::At(v6);
    }
    b.op(stmt(LD | B | ABS, 6)); //                                  ldb [6]: next header
    b.jeq(IPPROTO_TCP, Label::Next, Label::Reject);
    if !hosts.is_empty() {
        if v6_hosts.is_empty() {
            b.op(stmt(RET | K, 0));
        } else {
            host_tests(&mut b, &v6_hosts.iter().map(|h| h.to_vec()).collect::<Vec<_>>(), 8, 24);
        }
    }
    if ports.is_empty() {
        b.op(stmt(RET | K, snaplen));
    } else {
        port_tests(&mut b, ports, ABS, 40);
    }
    b.finish(snaplen)
}

/// Source (at `src`) or destination (at `dst`) address equal to one of `hosts` (each one or
/// four 32-bit words): a match goes on past the tests, no match rejects.
fn host_tests<H: AsRef<[u32]>>(b: &mut Builder, hosts: &[H], src: u32, dst: u32) {
    let mut to_end = Vec::new();
    for base in [src, dst] {
        for h in hosts {
            let words = h.as_ref();
            let mut fails = Vec::new();
            for (k, w) in words.iter().enumerate() {
                b.op(stmt(LD | W | ABS, base + 4 * k as u32)); //  ld [base + 4k]
                let j = b.jeq(*w, Label::Next, Label::Next);
                fails.push(j);
            }
            // All words equal: matched.
            let ok = b.jeq(0, Label::Next, Label::Next); // placeholder, patched to an always-jump
            to_end.push(ok);
            let next = b.0.len();
            for j in fails {
                if let Slot::Jump { jf, .. } = &mut b.0[j] {
                    *jf = Label::At(next);
                }
            }
        }
    }
    b.op(stmt(RET | K, 0)); // no address matched
    let end = b.0.len();
    for j in to_end {
        // `ja` as a jeq whose both branches lead past the tests.
        if let Slot::Jump { jt, jf, .. } = &mut b.0[j] {
            *jt = Label::At(end);
            *jf = Label::At(end);
        }
    }
}

/// What a frame looks like to the filter: its bytes and the skb's pkt_type.
pub struct TestFrame<'a> {
    pub data: &'a [u8],
    pub pkttype: u32,
    /// `skb->dev->ifindex` (SKF_AD_IFINDEX).
    pub ifindex: u32,
}

/// Why [`interpret`] could not run a program to its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterpretError {
    #[error("pc {0} ran off the program")]
    RanOff(usize),
    #[error("opcode {0:#x} not covered by this interpreter")]
    Opcode(u16),
}

/// Runs a classic BPF program on a frame: the accepted length (0 = dropped). Implements the
/// instructions `tcp_ports` emits, with the kernel's semantics (`___bpf_prog_run` on the
/// converted program, net/core/filter.c): a load past the end of the packet ends the program
/// returning 0; ALU results are 32-bit. Anything else is an error, so a program using more than
/// this covers is never silently "tested".
pub fn interpret(prog: &[Insn], f: &TestFrame<'_>) -> Result<u32, InterpretError> {
    let (mut a, mut x) = (0u32, 0u32);
    let mut pc = 0usize;
    let load = |off: u32, size: u32| -> Option<u32> {
        if off == SKF_AD_OFF + SKF_AD_PKTTYPE {
            return Some(f.pkttype);
        }
        if off == SKF_AD_OFF + SKF_AD_IFINDEX {
            return Some(f.ifindex);
        }
        let o = usize::try_from(off).ok()?;
        let b = f.data.get(o..o + size as usize)?;
        Some(b.iter().fold(0u32, |v, &c| (v << 8) | u32::from(c)))
    };
    loop {
        let i = prog.get(pc).ok_or(InterpretError::RanOff(pc))?;
        pc += 1;
        let size = match i.code & 0x18 {
            W => 4,
            H => 2,
            _ => 1,
        };
        match i.code {
            c if c == LD | H | ABS || c == LD | B | ABS || c == LD | W | ABS => match load(i.k, size) {
                Some(v) => a = v,
                None => return Ok(0),
            },
            c if c == LD | H | IND || c == LD | B | IND || c == LD | W | IND => match load(x.wrapping_add(i.k), size) {
                Some(v) => a = v,
                None => return Ok(0),
            },
            c if c == LDX | B | MSH => match load(i.k, 1) {
                Some(v) => x = 4 * (v & 0xf),
                None => return Ok(0),
            },
            c if c == JMP | JA | K => pc += i.k as usize,
            c if c == JMP | JEQ | K || c == JMP | JSET | K => {
                let t = if c == JMP | JEQ | K { a == i.k } else { a & i.k != 0 };
                pc += usize::from(if t { i.jt } else { i.jf });
            }
            c if c == ALU | AND | K => a &= i.k,
            c if c == RET | K => return Ok(i.k),
            c => return Err(InterpretError::Opcode(c)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn { code, jt, jf, k }
    }

    /// An Ethernet frame with an IPv4 (optionally with 4 bytes of options) or IPv6 header and a
    /// 20-byte TCP header, ports as given.
    fn frame(v6: bool, proto: u8, sport: u16, dport: u16, ip_opts: bool, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, proto, 64]);
            f.extend_from_slice(&[0; 32]);
        } else {
            let ihl = if ip_opts { 6 } else { 5 };
            f.extend_from_slice(&[0x08, 0x00, 0x40 | ihl, 0, 0, 0, 0, 0]);
            f.extend_from_slice(&frag.to_be_bytes());
            f.extend_from_slice(&[64, proto, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
            if ip_opts {
                f.extend_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
            }
        }
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0; 16]);
        f
    }

    fn run(prog: &[Insn], data: &[u8], pkttype: u32) -> u32 {
        interpret(prog, &TestFrame { data, pkttype, ifindex: 1 }).unwrap()
    }

    /// What the interpreter does not cover is an error with one line, never a silent pass.
    #[test]
    fn uncovered_programs_are_errors() {
        let f = TestFrame { data: &[], pkttype: 0, ifindex: 1 };
        assert_eq!(interpret(&[], &f).unwrap_err().to_string(), "pc 0 ran off the program");
        let e = interpret(&[ins(0x07, 0, 0, 0)], &f).unwrap_err();
        assert_eq!(e.to_string(), "opcode 0x7 not covered by this interpreter");
    }

    #[test]
    fn one_port_is_tcpdumps_program() {
        // `tcpdump -dd 'tcp and port 80'` (libpcap 1.10, Ethernet), the reference for the
        // instruction sequence; ours tests IPv4 first, then IPv6, with the same loads and jumps.
        let tcpdump = [
            ins(0x28, 0, 0, 12),
            ins(0x15, 0, 9, 0x800),
            ins(0x30, 0, 0, 23),
            ins(0x15, 0, 15, 6),
            ins(0x28, 0, 0, 20),
            ins(0x45, 13, 0, 0x1fff),
            ins(0xb1, 0, 0, 14),
            ins(0x48, 0, 0, 14),
            ins(0x15, 9, 0, 80),
            ins(0x48, 0, 0, 16),
            ins(0x15, 7, 8, 80),
            ins(0x15, 0, 7, 0x86dd),
            ins(0x30, 0, 0, 20),
            ins(0x15, 0, 5, 6),
            ins(0x28, 0, 0, 54),
            ins(0x15, 2, 0, 80),
            ins(0x28, 0, 0, 56),
            ins(0x15, 0, 1, 80),
            ins(0x6, 0, 0, 0x40000),
            ins(0x6, 0, 0, 0),
        ];
        let ours = tcp_ports(&[80], 0x40000, false);
        let key = |p: &[Insn]| p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect::<Vec<_>>();
        assert_eq!(key(&ours), key(&tcpdump));
    }

    #[test]
    fn keeps_tcp_on_the_ports_and_nothing_else() {
        let prog = tcp_ports(&[5001, 443], 256, true);
        for v6 in [false, true] {
            for opts in [false, true] {
                if v6 && opts {
                    continue;
                }
                // Either port, either direction.
                assert_eq!(run(&prog, &frame(v6, 6, 40000, 5001, opts, 0), 0), 256, "v6 {v6} opts {opts}");
                assert_eq!(run(&prog, &frame(v6, 6, 5001, 40000, opts, 0), 0), 256);
                assert_eq!(run(&prog, &frame(v6, 6, 443, 1, opts, 0), 0), 256);
                assert_eq!(run(&prog, &frame(v6, 6, 1, 443, opts, 0), 0), 256);
                // Other ports, UDP on the port, the outgoing copy.
                assert_eq!(run(&prog, &frame(v6, 6, 40000, 5002, opts, 0), 0), 0);
                assert_eq!(run(&prog, &frame(v6, 17, 40000, 5001, opts, 0), 0), 0);
                assert_eq!(run(&prog, &frame(v6, 6, 40000, 5001, opts, 0), PACKET_OUTGOING), 0);
            }
        }
        // IPv4 header options move the ports: found through X (4*IHL), not at a fixed offset.
        let mut f = frame(false, 6, 1, 2, true, 0);
        f[36..38].copy_from_slice(&5001u16.to_be_bytes()); // where ports sit without options
        assert_eq!(run(&prog, &f, 0), 0);
        // A non-first fragment has no TCP header; a first fragment (MF set, offset 0) has.
        assert_eq!(run(&prog, &frame(false, 6, 1, 5001, false, 0x0010), 0), 0);
        assert_eq!(run(&prog, &frame(false, 6, 1, 5001, false, 0x2000), 0), 256);
        // ARP, and frames cut short: a load past the end drops the frame (kernel semantics).
        let mut arp = frame(false, 6, 1, 5001, false, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(run(&prog, &arp, 0), 0);
        let f = frame(false, 6, 1, 5001, false, 0);
        assert_eq!(run(&prog, &f[..35], 0), 0);
        // Without skip_outgoing the outgoing copy is kept.
        let prog = tcp_ports(&[5001], 96, false);
        assert_eq!(run(&prog, &frame(true, 6, 5001, 9, false, 0), PACKET_OUTGOING), 96);
    }

    /// `--port` lists of any length (issue 24: about 62 ports overflowed the 8-bit jump offsets
    /// and panicked): landings keep Accept and Reject within reach; every port still matches.
    #[test]
    fn any_number_of_ports_fits_the_jump_range() {
        for n in [41u16, 62, 200, 900] {
            let ports: Vec<u16> = (1..=n).collect();
            for prog in [tcp_ports(&ports, 128, true), tcp_l3(&ports, &[], 128, Some(1))] {
                assert!(prog.len() <= 4096, "BPF_MAXINSNS");
                let l3 = prog.len() != tcp_ports(&ports, 128, true).len();
                let strip = |f: Vec<u8>| if l3 { f[14..].to_vec() } else { f };
                for p in [1, n / 2, n] {
                    assert_eq!(run(&prog, &strip(frame(false, 6, 60000, p, false, 0)), 0), 128, "{n} ports, port {p}");
                    assert_eq!(run(&prog, &strip(frame(true, 6, p, 60000, false, 0)), 0), 128, "{n} ports, port {p}");
                }
                assert_eq!(run(&prog, &strip(frame(false, 6, n + 1, 60000, false, 0)), 0), 0);
                assert_eq!(run(&prog, &strip(frame(true, 17, 1, 60000, false, 0)), 0), 0, "UDP");
            }
        }
    }

    #[test]
    fn many_ports_still_fit_the_jump_range() {
        let ports: Vec<u16> = (1..=50).collect();
        let prog = tcp_ports(&ports, 128, true);
        assert!(prog.len() < 256);
        assert_eq!(run(&prog, &frame(false, 6, 60000, 50, false, 0), 0), 128);
        assert_eq!(run(&prog, &frame(true, 6, 1, 60000, false, 0), 0), 128);
        assert_eq!(run(&prog, &frame(true, 6, 51, 60000, false, 0), 0), 0);
    }

    /// The cooked (network-layer) filter of `tcpstall watch`: TCP on the ports and hosts asked,
    /// loopback's outgoing copies dropped, everything else rejected.
    #[test]
    fn watch_filter_keeps_tcp_on_the_ports_and_hosts_asked() {
        let l3 = |f: Vec<u8>| f[14..].to_vec();
        let run = |prog: &[Insn], data: &[u8], pkttype: u32, ifindex: u32| {
            interpret(prog, &TestFrame { data, pkttype, ifindex }).unwrap()
        };
        let any = tcp_l3(&[], &[], 96, Some(1));
        assert_eq!(run(&any, &l3(frame(false, 6, 1, 2, false, 0)), 0, 1), 96);
        assert_eq!(run(&any, &l3(frame(true, 6, 1, 2, false, 0)), 0, 2), 96);
        assert_eq!(run(&any, &l3(frame(false, 17, 1, 2, false, 0)), 0, 1), 0, "UDP");
        assert_eq!(run(&any, &l3(frame(false, 6, 1, 2, false, 0)), 4, 1), 0, "outgoing copy on lo");
        assert_eq!(run(&any, &l3(frame(false, 6, 1, 2, false, 0)), 4, 2), 96, "outgoing on another interface");
        assert_eq!(run(&any, &l3(frame(false, 6, 1, 2, false, 0x20)), 0, 1), 0, "a later fragment");
        let ports = tcp_l3(&[8080, 9090], &[], 96, None);
        assert_eq!(run(&ports, &l3(frame(false, 6, 8080, 40000, true, 0)), 0, 1), 96);
        assert_eq!(run(&ports, &l3(frame(true, 6, 40000, 9090, false, 0)), 0, 1), 96);
        assert_eq!(run(&ports, &l3(frame(false, 6, 1, 2, false, 0)), 0, 1), 0);
        assert_eq!(run(&ports, &l3(frame(true, 6, 1, 2, false, 0)), 0, 1), 0);
        // frame() puts 127.0.0.1 both ways (IPv4) and zero addresses (IPv6).
        let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let other: std::net::IpAddr = "10.0.0.9".parse().unwrap();
        let v6zero: std::net::IpAddr = "::".parse().unwrap();
        let host = tcp_l3(&[8080], &[other, lo], 96, None);
        assert_eq!(run(&host, &l3(frame(false, 6, 8080, 1, false, 0)), 0, 1), 96);
        assert_eq!(run(&host, &l3(frame(false, 6, 1, 1, false, 0)), 0, 1), 0, "host but not port");
        assert_eq!(run(&host, &l3(frame(true, 6, 8080, 1, false, 0)), 0, 1), 0, "no IPv6 host asked");
        let not_here = tcp_l3(&[], &[other], 96, None);
        assert_eq!(run(&not_here, &l3(frame(false, 6, 8080, 1, false, 0)), 0, 1), 0);
        let v6 = tcp_l3(&[], &[v6zero], 96, None);
        assert_eq!(run(&v6, &l3(frame(true, 6, 8080, 1, false, 0)), 0, 1), 96);
        assert_eq!(run(&v6, &l3(frame(false, 6, 8080, 1, false, 0)), 0, 1), 0);
    }
}
