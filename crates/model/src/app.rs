//! The applications: each side's Step program compiled once into the exact socket operations of
//! its strategy (`SideOpts::plan_message`), and a cursor over prologue, rounds and epilogue.

use scenario::{Call, SideOpts, SockOp, Step};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Ready,
    Recv,
    SendBlocked,
    Sleeping,
    /// Inside a send step, between two calls (the application's per-call cost).
    BusySend,
    /// Inside a receive step, between two recv calls.
    BusyRecv,
    Done,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Sock(SockOp),
    Write { len: u64, more: bool },
}

/// Where an application is in its program.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor {
    pub phase: u8, // 0 prologue, 1 rounds, 2 epilogue, 3 done
    pub round: u64,
    pub idx: usize,
}

/// A step compiled once: its kind and, for a send, the exact socket operations of the plan.
#[derive(Debug, Clone)]
pub(crate) enum Compiled {
    Send(Vec<Op>),
    Recv(u64),
    Sleep(u64),
}

pub(crate) fn compile(steps: &[Step], opts: &SideOpts) -> Vec<Compiled> {
    steps
        .iter()
        .map(|st| match st {
            Step::Send(writes) => {
                let plan = opts.plan_message(writes);
                let mut ops: Vec<Op> = plan.pre.iter().map(|o| Op::Sock(*o)).collect();
                for c in &plan.calls {
                    let more = matches!(c, Call::Send { more: true, .. });
                    ops.push(Op::Write { len: u64::from(c.len()), more });
                }
                ops.extend(plan.post.iter().map(|o| Op::Sock(*o)));
                Compiled::Send(ops)
            }
            Step::Recv(n) => Compiled::Recv(u64::from(*n)),
            Step::Sleep { ns } => Compiled::Sleep(*ns),
        })
        .collect()
}

pub(crate) struct App {
    pub opts: SideOpts,
    /// prologue, round, epilogue, compiled.
    pub steps: [Vec<Compiled>; 3],
    pub op_idx: usize,
    pub partial: Option<u64>,
    pub rounds_total: u64,
    pub warmup: u64,
    pub cur: Cursor,
    pub state: State,
    pub recv_left: u64,
    pub step_start: u64,
    pub round_start: u64,
    pub round_sleep: u64,
    pub round_trace: usize,
    pub step_trace: usize,
    /// Stream mode: the client writes until this time; the server reads forever.
    pub stream_until: Option<u64>,
    pub endless_reader: bool,
    pub is_client: bool,
}

impl App {
    /// An application at the start of its program: `steps` are the compiled prologue, round and
    /// epilogue; `rounds_total` counts warm-up rounds too.
    pub(crate) fn new(
        opts: &SideOpts,
        steps: [Vec<Compiled>; 3],
        rounds_total: u64,
        warmup: u64,
        is_client: bool,
    ) -> App {
        App {
            opts: opts.clone(),
            steps,
            op_idx: 0,
            partial: None,
            rounds_total,
            warmup,
            cur: Cursor { phase: 0, round: 0, idx: 0 },
            state: State::Ready,
            recv_left: 0,
            step_start: 0,
            round_start: 0,
            round_sleep: 0,
            round_trace: 0,
            step_trace: 0,
            stream_until: None,
            endless_reader: false,
            is_client,
        }
    }

    pub(crate) fn step(&self) -> Option<&Compiled> {
        self.steps.get(usize::from(self.cur.phase)).and_then(|v| v.get(self.cur.idx))
    }
    /// Move the cursor to the next step that exists.
    pub(crate) fn advance(&mut self) {
        self.cur.idx += 1;
        self.normalise();
    }
    pub(crate) fn normalise(&mut self) {
        loop {
            let Some(steps) = self.steps.get(usize::from(self.cur.phase)) else { return };
            let len = steps.len();
            if self.cur.idx < len && !(self.cur.phase == 1 && self.cur.round >= self.rounds_total) {
                return;
            }
            if self.cur.phase == 1 && self.cur.idx >= len && self.cur.round + 1 < self.rounds_total {
                self.cur.round += 1;
                self.cur.idx = 0;
                if len > 0 {
                    return;
                }
                continue;
            }
            self.cur.phase += 1;
            self.cur.idx = 0;
            self.cur.round = 0;
        }
    }
}
