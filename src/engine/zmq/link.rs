//! One ZMQ worker's sockets and the thread that owns them.
//!
//! The gateway plays vLLM's front-end (`vllm/v1/engine/core_client.py :: MPClient`): it
//! binds, and each data-parallel rank's engine core dials in. The sockets:
//!
//! - the handshake ROUTER at the worker's `tcp://` handshake address: HELLO from a rank is
//!   answered with INIT naming the input and output addresses; READY follows once the
//!   engine has loaded (`core.py :: EngineCoreProc._perform_handshakes`);
//! - one input ROUTER at the worker's `ipc://` path, shared by the ranks, which register on
//!   it once and then take requests and aborts addressed by their identity (the rank as
//!   two little-endian bytes);
//! - one output PULL per rank (`<path>-out-<rank>`). vLLM shares one between its engines,
//!   but its dead sentinel (`ENGINE_CORE_DEAD`) names no rank, and a rank killed outright
//!   sends none at all; with a socket each, the sentinel and the socket monitor's
//!   `DISCONNECTED` both say which rank died.
//!
//! libzmq sockets belong to one thread, so every socket lives on the link's own thread,
//! which blocks in `zmq_poll` on them and on a wake pipe. The data plane never touches a
//! socket: a generation encodes its request on its own thread and queues it, with the
//! channel its events come back on; the link thread sends it, and hands each output
//! message's steps to their requests' channels. Those channels are unbounded, so a slow
//! client never holds up the output socket; what one request can queue is bounded by its
//! `max_tokens`, which the gateway always sends.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc as tmpsc, watch};

use super::wire::{self, Finish, Handshake};
use super::{tokenspeed, Protocol};
use crate::engine::{Complete, EngineError, Event, Failure, TokenLogprob};

/// What a request's stream receives: an event, or the failure that ends it.
pub type Delivery = Result<Event, Failure>;

/// Where a link binds and what its engines are.
#[derive(Clone, Debug)]
pub struct LinkSettings {
    /// `tcp://host:port`, bound for the ranks' handshakes.
    pub handshake: String,
    /// The worker's socket path (its URL without `ipc://`).
    pub path: String,
    /// Ranks that may dial in: identities `0..dp_size`.
    pub dp_size: u16,
    /// Whose payloads the ranks speak.
    pub protocol: Protocol,
    /// The worker's URL, for logs.
    pub worker: String,
}

/// The largest message a rank may send; libzmq drops the connection of a peer that sends a
/// larger one instead of buffering it (the registration, and a step's outputs with their
/// logprob arrays, are far below this).
const MAX_MESSAGE: i64 = 64 << 20;

/// The longest socket path a rank's output address may have (`sun_path` is 108 bytes).
const MAX_IPC_PATH: usize = 100;

/// A worker's link to its engine ranks. Cheap to clone; the thread and its sockets end
/// when the last clone is dropped.
#[derive(Clone)]
pub struct Link {
    handle: Arc<Handle>,
}

struct Handle {
    commands: Sender<Command>,
    wake: Arc<Wake>,
    state: Arc<State>,
    protocol: Protocol,
}

/// What the data plane reads without asking the link thread.
pub struct State {
    ranks: Box<[RankSlot]>,
    /// The smallest `max_model_len` the ranks registered with; 0 until one did.
    max_model_len: AtomicU32,
    /// How many ranks take requests now.
    live: watch::Sender<usize>,
    /// Where the next pick starts, so ranks with equal load take turns.
    turn: AtomicUsize,
}

#[derive(Default)]
struct RankSlot {
    live: AtomicBool,
    in_flight: AtomicU32,
}

/// The data plane's side of the wake pipe: a byte written only when none is pending, so a
/// burst of requests costs the link thread one wake-up.
struct Wake {
    tx: UnixStream,
    pending: AtomicBool,
}

impl Wake {
    fn wake(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            // Non-blocking: a full pipe already holds a wake-up.
            let _ = (&self.tx).write(&[1]);
        }
    }
}

enum Command {
    Add(Add),
    Abort { request_id: String },
    Close,
}

/// A request for the link thread to send.
pub struct Add {
    pub rank: u16,
    pub request_id: String,
    /// The request whose sequence this is when one prompt asked for several (OpenAI's
    /// `n`); an abort of the parent stops them all.
    pub parent: Option<String>,
    pub index: u32,
    pub prompt_tokens: u32,
    /// `EngineCoreRequest`, encoded.
    pub payload: Vec<u8>,
    pub events: tmpsc::UnboundedSender<Delivery>,
}

impl Link {
    /// Binds the handshake and input sockets and starts the link's thread. Fails when an
    /// address cannot be bound (another worker holds the handshake address, say).
    pub fn bind(settings: LinkSettings) -> Result<Link, String> {
        if settings.path.len() > MAX_IPC_PATH {
            return Err(format!(
                "the ipc:// path is {} bytes; at most {MAX_IPC_PATH} fit a socket address",
                settings.path.len()
            ));
        }
        let context = context();
        let handshake = router(&context)?;
        handshake
            .bind(&settings.handshake)
            .map_err(|e| format!("cannot bind {}: {e}", settings.handshake))?;
        let input = router(&context)?;
        // A rank that left is unreachable at once rather than a silent drop.
        set(input.set_router_mandatory(true))?;
        let input_address = format!("ipc://{}", settings.path);
        input
            .bind(&input_address)
            .map_err(|e| format!("cannot bind {input_address}: {e}"))?;
        let (wake_tx, wake_rx) = UnixStream::pair().map_err(|e| format!("wake pipe: {e}"))?;
        for end in [&wake_tx, &wake_rx] {
            end.set_nonblocking(true)
                .map_err(|e| format!("wake pipe: {e}"))?;
        }
        let ranks = usize::from(settings.dp_size.max(1));
        let state = Arc::new(State {
            ranks: (0..ranks).map(|_| RankSlot::default()).collect(),
            max_model_len: AtomicU32::new(0),
            live: watch::channel(0).0,
            turn: AtomicUsize::new(0),
        });
        let wake = Arc::new(Wake {
            tx: wake_tx,
            pending: AtomicBool::new(false),
        });
        let (commands, receiver) = mpsc::channel();
        let protocol = settings.protocol;
        let core = Core {
            context,
            handshake,
            input,
            input_address,
            ranks: (0..ranks).map(|_| Rank::default()).collect(),
            requests: HashMap::new(),
            parents: HashMap::new(),
            commands: receiver,
            wake_rx,
            wake: wake.clone(),
            state: state.clone(),
            settings,
        };
        std::thread::Builder::new()
            .name("tollgate-zmq".into())
            .spawn(move || core.run())
            .map_err(|e| format!("cannot start the link thread: {e}"))?;
        Ok(Link {
            handle: Arc::new(Handle {
                commands,
                wake,
                state,
                protocol,
            }),
        })
    }

    pub fn protocol(&self) -> Protocol {
        self.handle.protocol
    }

    /// The runtime, as errors and logs name it.
    pub fn runtime(&self) -> &'static str {
        self.handle.protocol.runtime()
    }

    pub fn same(&self, other: &Link) -> bool {
        Arc::ptr_eq(&self.handle, &other.handle)
    }

    /// The engines' context window, once a rank registered.
    pub fn max_model_len(&self) -> Option<u32> {
        Some(self.handle.state.max_model_len.load(Ordering::Relaxed)).filter(|n| *n > 0)
    }

    /// How many ranks take requests, now and as it changes; ends when the link does.
    pub fn live_ranks(&self) -> watch::Receiver<usize> {
        self.handle.state.live.subscribe()
    }

    /// The live rank with the fewest requests in flight (ties taken in turn), counted as
    /// busier by `requests`; `None` when no rank is live.
    pub fn pick(&self, requests: u32) -> Option<u16> {
        let ranks = &self.handle.state.ranks;
        let start = self.handle.state.turn.fetch_add(1, Ordering::Relaxed);
        let mut best: Option<(usize, u32)> = None;
        for step in 0..ranks.len() {
            let i = (start + step) % ranks.len();
            let slot = &ranks[i];
            if !slot.live.load(Ordering::Acquire) {
                continue;
            }
            let load = slot.in_flight.load(Ordering::Relaxed);
            match best {
                Some((_, least)) if least <= load => {}
                _ => best = Some((i, load)),
            }
        }
        let (rank, _) = best?;
        ranks[rank].in_flight.fetch_add(requests, Ordering::Relaxed);
        u16::try_from(rank).ok()
    }

    /// Undoes a [`pick`](Self::pick) for `requests` that were never queued.
    pub fn unpick(&self, rank: u16, requests: u32) {
        if let Some(slot) = self.handle.state.ranks.get(usize::from(rank)) {
            for _ in 0..requests {
                decrement(&slot.in_flight);
            }
        }
    }

    /// Queues a request for its rank.
    pub fn add(&self, add: Add) -> Result<(), Failure> {
        self.send(Command::Add(add))
    }

    /// Stops `request_id` (every sequence of it) on its rank; no answer comes.
    pub fn abort(&self, request_id: String) -> Result<(), Failure> {
        self.send(Command::Abort { request_id })
    }

    fn send(&self, command: Command) -> Result<(), Failure> {
        self.handle
            .commands
            .send(command)
            .map_err(|_| Failure::Unreachable("the engine link has closed".into()))?;
        self.handle.wake.wake();
        Ok(())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close);
        self.wake.wake();
    }
}

fn decrement(counter: &AtomicU32) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

/// One libzmq context for every link: its I/O thread serves them all.
fn context() -> zmq::Context {
    static CONTEXT: OnceLock<zmq::Context> = OnceLock::new();
    CONTEXT.get_or_init(zmq::Context::new).clone()
}

fn set(result: zmq::Result<()>) -> Result<(), String> {
    result.map_err(|e| format!("socket option: {e}"))
}

/// A ROUTER as vLLM's front-end makes one (`network_utils.py :: make_zmq_socket`): no
/// high-water mark, no linger on close; and a rank that dials back takes its identity over
/// from the connection it left.
fn router(context: &zmq::Context) -> Result<zmq::Socket, String> {
    let socket = context
        .socket(zmq::ROUTER)
        .map_err(|e| format!("socket: {e}"))?;
    set(socket.set_sndhwm(0))?;
    set(socket.set_rcvhwm(0))?;
    set(socket.set_linger(0))?;
    set(socket.set_router_handover(true))?;
    set(socket.set_maxmsgsize(MAX_MESSAGE))?;
    Ok(socket)
}

/// Where a rank is in its life, as the link sees it.
#[derive(Default)]
struct Rank {
    /// Its output socket and that socket's monitor, bound at its first HELLO.
    output: Option<Output>,
    /// Said HELLO and was sent INIT.
    greeted: bool,
    /// Registered on the input socket.
    registered: bool,
    /// Said READY.
    ready: bool,
    /// Takes requests.
    live: bool,
    /// When its output connection dropped, while its last frames may still be on their
    /// way ([`LOST_GRACE`]).
    lost: Option<Instant>,
}

/// How long a rank whose output connection dropped is given for what it sent before (its
/// last outputs, the dead sentinel that says why) to be read: libzmq reports the
/// disconnect on the monitor socket and the data on the output socket, in no set order.
const LOST_GRACE: Duration = Duration::from_millis(50);

struct Output {
    pull: zmq::Socket,
    monitor: zmq::Socket,
    address: String,
    /// Connections the monitor saw accepted and not yet lost.
    connections: u32,
}

/// A request in flight on a rank.
struct Pending {
    rank: u16,
    /// The request this is one sequence of, when it has several.
    parent: Option<String>,
    index: u32,
    prompt_tokens: u32,
    generated: u32,
    events: tmpsc::UnboundedSender<Delivery>,
}

/// The link thread's state: every socket, and the requests in flight.
struct Core {
    context: zmq::Context,
    handshake: zmq::Socket,
    input: zmq::Socket,
    input_address: String,
    ranks: Vec<Rank>,
    requests: HashMap<String, Pending>,
    /// A parent request's sequences, for requests with several.
    parents: HashMap<String, Vec<String>>,
    commands: Receiver<Command>,
    wake_rx: UnixStream,
    wake: Arc<Wake>,
    state: Arc<State>,
    settings: LinkSettings,
}

/// What `zmq_poll` found readable, read out before any socket is used again.
#[derive(Default)]
struct Ready {
    handshake: bool,
    input: bool,
    wake: bool,
    outputs: Vec<(u16, bool, bool)>,
}

impl Core {
    fn run(mut self) {
        tracing::info!(
            worker = %self.settings.worker,
            handshake = %self.settings.handshake,
            input = %self.input_address,
            "ZMQ worker: waiting for engine ranks to dial in"
        );
        loop {
            let ready = match self.poll() {
                Ok(ready) => ready,
                Err(err) => {
                    tracing::error!(worker = %self.settings.worker, error = %err, "ZMQ poll failed; the link stops");
                    break;
                }
            };
            if ready.wake && !self.commands_in() {
                break;
            }
            if ready.handshake {
                self.handshakes_in();
            }
            if ready.input {
                self.registrations_in();
            }
            // What a rank sent before its connection dropped is read first: its last
            // outputs, and the dead sentinel, which says why.
            for (rank, data, monitor) in ready.outputs {
                if data {
                    self.outputs_in(rank);
                }
                if monitor {
                    self.monitor_in(rank);
                }
            }
            self.settle_lost();
        }
        self.close();
    }

    fn poll(&mut self) -> zmq::Result<Ready> {
        // Woken in time to settle a rank whose connection dropped; otherwise only by a
        // socket or the wake pipe.
        let timeout = if self.ranks.iter().any(|r| r.lost.is_some()) {
            LOST_GRACE.as_millis() as i64
        } else {
            -1
        };
        let mut items = Vec::with_capacity(3 + 2 * self.ranks.len());
        items.push(self.handshake.as_poll_item(zmq::POLLIN));
        items.push(self.input.as_poll_item(zmq::POLLIN));
        items.push(zmq::PollItem::from_fd(
            self.wake_rx.as_raw_fd(),
            zmq::POLLIN,
        ));
        let mut ranks = Vec::new();
        for (rank, state) in self.ranks.iter().enumerate() {
            if let Some(output) = &state.output {
                items.push(output.pull.as_poll_item(zmq::POLLIN));
                items.push(output.monitor.as_poll_item(zmq::POLLIN));
                ranks.push(rank as u16);
            }
        }
        loop {
            match zmq::poll(&mut items, timeout) {
                Ok(_) => break,
                Err(zmq::Error::EINTR) => continue,
                Err(err) => return Err(err),
            }
        }
        Ok(Ready {
            handshake: items[0].is_readable(),
            input: items[1].is_readable(),
            wake: items[2].is_readable(),
            outputs: ranks
                .iter()
                .enumerate()
                .map(|(i, rank)| {
                    (
                        *rank,
                        items[3 + 2 * i].is_readable(),
                        items[4 + 2 * i].is_readable(),
                    )
                })
                .collect(),
        })
    }

    /// Runs the queued commands; `false` once the link is to close.
    fn commands_in(&mut self) -> bool {
        let mut sink = [0u8; 64];
        loop {
            match (&self.wake_rx).read(&mut sink) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        // Cleared after the pipe is emptied and before the queue is read: a command queued
        // before this store is read below; one queued after it writes a new wake-up byte.
        // (Cleared before emptying the pipe, a wake-up written in between would be read
        // with `pending` left set, and every later sender would skip its byte.) A swap, not
        // a store: reading the senders' `true` orders their queued commands before the read.
        self.wake.pending.swap(false, Ordering::AcqRel);
        loop {
            match self.commands.try_recv() {
                Ok(Command::Add(add)) => self.send_add(add),
                Ok(Command::Abort { request_id }) => self.abort(&request_id),
                Ok(Command::Close) | Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    fn send_add(&mut self, add: Add) {
        let rank = add.rank;
        let live = self.ranks.get(usize::from(rank)).is_some_and(|r| r.live);
        let sent = if live {
            self.input
                .send_multipart(
                    [&identity(rank)[..], &[wire::ADD][..], &add.payload[..]],
                    zmq::DONTWAIT,
                )
                .map_err(|err| format!("could not be sent: {err}"))
        } else {
            Err("is not connected".to_owned())
        };
        if let Err(why) = sent {
            self.release(rank);
            let _ = add.events.send(Err(Failure::Unreachable(format!(
                "{} engine rank {rank} {why}",
                self.settings.protocol.runtime()
            ))));
            return;
        }
        if let Some(parent) = &add.parent {
            self.parents
                .entry(parent.clone())
                .or_default()
                .push(add.request_id.clone());
        }
        self.requests.insert(
            add.request_id,
            Pending {
                rank,
                parent: add.parent,
                index: add.index,
                prompt_tokens: add.prompt_tokens,
                generated: 0,
                events: add.events,
            },
        );
    }

    fn abort(&mut self, request_id: &str) {
        match self.parents.remove(request_id) {
            Some(children) => {
                for child in children {
                    self.abort_one(&child);
                }
            }
            None => self.abort_one(request_id),
        }
    }

    /// vLLM answers an abort with nothing (`EngineCore.abort_requests`): the request ends
    /// here, and late outputs for it are dropped as unknown.
    fn abort_one(&mut self, request_id: &str) {
        let Some(pending) = self.requests.remove(request_id) else {
            return;
        };
        self.release(pending.rank);
        self.forget_child(request_id, &pending);
        let frames = [
            &identity(pending.rank)[..],
            &[wire::ABORT][..],
            &wire::abort(request_id)[..],
        ];
        if let Err(err) = self.input.send_multipart(frames, zmq::DONTWAIT) {
            tracing::debug!(request_id, rank = pending.rank, error = %err, "abort not delivered");
        }
    }

    /// A sequence ended: its parent no longer waits for it (and is forgotten with its
    /// last one).
    fn forget_child(&mut self, request_id: &str, pending: &Pending) {
        let Some(parent) = &pending.parent else {
            return;
        };
        if let Some(children) = self.parents.get_mut(parent) {
            children.retain(|child| child != request_id);
            if children.is_empty() {
                self.parents.remove(parent);
            }
        }
    }

    fn release(&self, rank: u16) {
        if let Some(slot) = self.state.ranks.get(usize::from(rank)) {
            decrement(&slot.in_flight);
        }
    }

    fn handshakes_in(&mut self) {
        while let Some(frames) = recv(&self.handshake) {
            let [id, payload] = &frames[..] else {
                tracing::warn!(worker = %self.settings.worker, frames = frames.len(), "handshake message of an unexpected shape ignored");
                continue;
            };
            let Some(rank) = self.rank_of(id) else {
                continue;
            };
            match wire::handshake(payload) {
                Ok(Handshake::Hello) => self.hello(rank, id),
                Ok(Handshake::Ready) => {
                    self.ranks[usize::from(rank)].ready = true;
                    self.maybe_live(rank);
                }
                Ok(Handshake::Other(status)) => {
                    tracing::warn!(worker = %self.settings.worker, rank, status, "unknown handshake status ignored");
                }
                Err(err) => {
                    tracing::warn!(worker = %self.settings.worker, rank, error = %err, "unreadable handshake message ignored");
                }
            }
        }
    }

    /// The rank an identity names, when it is one of this worker's.
    fn rank_of(&self, id: &[u8]) -> Option<u16> {
        let rank = <[u8; 2]>::try_from(id).ok().map(u16::from_le_bytes);
        match rank {
            Some(rank) if usize::from(rank) < self.ranks.len() => Some(rank),
            _ => {
                tracing::warn!(
                    worker = %self.settings.worker,
                    identity = ?id,
                    dp_size = self.ranks.len(),
                    "an engine outside this worker's ranks dialled in; ignored (check its --data-parallel-rank and the worker's dp_size)"
                );
                None
            }
        }
    }

    /// HELLO: a rank starting (or starting again). Anything it had in flight is lost.
    fn hello(&mut self, rank: u16, id: &[u8]) {
        if self.ranks[usize::from(rank)].live || self.ranks[usize::from(rank)].greeted {
            self.rank_down(rank, "started again");
        }
        if self.ranks[usize::from(rank)].output.is_none() {
            match self.bind_output(rank) {
                Ok(output) => self.ranks[usize::from(rank)].output = Some(output),
                Err(err) => {
                    tracing::error!(worker = %self.settings.worker, rank, error = %err, "cannot bind the rank's output socket");
                    return;
                }
            }
        }
        let Some(output) = &self.ranks[usize::from(rank)].output else {
            return;
        };
        let init = wire::init(&self.input_address, &output.address);
        if let Err(err) = self
            .handshake
            .send_multipart([id, &init[..]], zmq::DONTWAIT)
        {
            tracing::warn!(worker = %self.settings.worker, rank, error = %err, "INIT not sent");
            return;
        }
        let state = &mut self.ranks[usize::from(rank)];
        state.greeted = true;
        state.registered = false;
        state.ready = false;
        tracing::info!(worker = %self.settings.worker, rank, "engine rank said HELLO; INIT sent");
    }

    fn bind_output(&self, rank: u16) -> Result<Output, String> {
        let pull = self
            .context
            .socket(zmq::PULL)
            .map_err(|e| format!("socket: {e}"))?;
        set(pull.set_rcvhwm(0))?;
        set(pull.set_linger(0))?;
        set(pull.set_maxmsgsize(MAX_MESSAGE))?;
        let address = format!("ipc://{}-out-{rank}", self.settings.path);
        pull.bind(&address)
            .map_err(|e| format!("cannot bind {address}: {e}"))?;
        static MONITORS: AtomicUsize = AtomicUsize::new(0);
        let monitor_address = format!(
            "inproc://tollgate-zmq-monitor-{}",
            MONITORS.fetch_add(1, Ordering::Relaxed)
        );
        let events = zmq::SocketEvent::ACCEPTED as i32 | zmq::SocketEvent::DISCONNECTED as i32;
        pull.monitor(&monitor_address, events)
            .map_err(|e| format!("monitor: {e}"))?;
        let monitor = self
            .context
            .socket(zmq::PAIR)
            .map_err(|e| format!("socket: {e}"))?;
        monitor
            .connect(&monitor_address)
            .map_err(|e| format!("monitor: {e}"))?;
        Ok(Output {
            pull,
            monitor,
            address,
            connections: 0,
        })
    }

    fn registrations_in(&mut self) {
        while let Some(frames) = recv(&self.input) {
            let [id, payload] = &frames[..] else {
                tracing::warn!(worker = %self.settings.worker, frames = frames.len(), "input-socket message of an unexpected shape ignored");
                continue;
            };
            let Some(rank) = self.rank_of(id) else {
                continue;
            };
            match wire::registration(payload) {
                Ok(registered) => {
                    if let Some(len) = registered.max_model_len.filter(|n| *n > 0) {
                        let known = &self.state.max_model_len;
                        let _ = known.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                            Some(if now == 0 { len } else { now.min(len) })
                        });
                    }
                    tracing::info!(
                        worker = %self.settings.worker,
                        rank,
                        max_model_len = registered.max_model_len,
                        engine_version = registered.vllm_version.as_deref().unwrap_or("unknown"),
                        "engine rank registered"
                    );
                    self.ranks[usize::from(rank)].registered = true;
                    self.maybe_live(rank);
                }
                Err(err) => {
                    tracing::warn!(worker = %self.settings.worker, rank, error = %err, "unreadable registration ignored");
                }
            }
        }
    }

    /// A rank that said HELLO, registered and said READY takes requests.
    fn maybe_live(&mut self, rank: u16) {
        let state = &mut self.ranks[usize::from(rank)];
        if state.live || !(state.greeted && state.registered && state.ready) {
            return;
        }
        state.live = true;
        self.state.ranks[usize::from(rank)]
            .live
            .store(true, Ordering::Release);
        tracing::info!(worker = %self.settings.worker, rank, "engine rank ready");
        self.publish_live();
    }

    fn publish_live(&self) {
        let live = self.ranks.iter().filter(|r| r.live).count();
        self.state.live.send_replace(live);
    }

    /// A rank is gone: its requests fail at once, and it takes none until it dials back.
    fn rank_down(&mut self, rank: u16, why: &str) {
        let state = &mut self.ranks[usize::from(rank)];
        let was_live = state.live;
        state.live = false;
        state.lost = None;
        state.greeted = false;
        state.registered = false;
        state.ready = false;
        self.state.ranks[usize::from(rank)]
            .live
            .store(false, Ordering::Release);
        let runtime = self.settings.protocol.runtime();
        let mut failed = 0;
        self.requests.retain(|_, pending| {
            if pending.rank != rank {
                return true;
            }
            failed += 1;
            let _ = pending.events.send(Err(Failure::Failed(format!(
                "the {runtime} engine rank {rank} {why} during the request"
            ))));
            false
        });
        let requests = &self.requests;
        self.parents.retain(|_, children| {
            children.retain(|child| requests.contains_key(child));
            !children.is_empty()
        });
        self.state.ranks[usize::from(rank)]
            .in_flight
            .store(0, Ordering::Relaxed);
        tracing::warn!(worker = %self.settings.worker, rank, failed_requests = failed, was_live, "engine rank {why}");
        self.publish_live();
    }

    fn monitor_in(&mut self, rank: u16) {
        loop {
            let Some(output) = self.ranks[usize::from(rank)].output.as_mut() else {
                return;
            };
            let Some(frames) = recv(&output.monitor) else {
                return;
            };
            let Some(event) = frames
                .first()
                .and_then(|f| f.get(..2))
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
            else {
                continue;
            };
            if event == zmq::SocketEvent::ACCEPTED as u16 {
                output.connections += 1;
                continue;
            }
            if event != zmq::SocketEvent::DISCONNECTED as u16 {
                continue;
            }
            output.connections = output.connections.saturating_sub(1);
            let lost = output.connections == 0;
            let state = &mut self.ranks[usize::from(rank)];
            if lost && (state.live || state.registered) && state.lost.is_none() {
                state.lost = Some(Instant::now());
            }
        }
    }

    /// Ranks whose output connection dropped [`LOST_GRACE`] ago: what they sent before is
    /// read (a dead sentinel takes the rank down with its own reason), then a rank still
    /// without a connection is down.
    fn settle_lost(&mut self) {
        let now = Instant::now();
        for rank in 0..self.ranks.len() {
            let due = self.ranks[rank]
                .lost
                .is_some_and(|since| now.saturating_duration_since(since) >= LOST_GRACE);
            if !due {
                continue;
            }
            let rank = rank as u16;
            self.outputs_in(rank);
            let state = &mut self.ranks[usize::from(rank)];
            let reconnected = state.output.as_ref().is_some_and(|o| o.connections > 0);
            if state.lost.take().is_some() && !reconnected {
                self.rank_down(rank, "disconnected");
            }
        }
    }

    fn outputs_in(&mut self, rank: u16) {
        loop {
            let Some(output) = &self.ranks[usize::from(rank)].output else {
                return;
            };
            let Some(frames) = recv(&output.pull) else {
                return;
            };
            if frames.len() == 1 && frames[0] == wire::ENGINE_CORE_DEAD {
                self.rank_down(rank, "died (ENGINE_CORE_DEAD)");
                continue;
            }
            let read = match self.settings.protocol {
                Protocol::Vllm => wire::outputs(&frames),
                Protocol::Tokenspeed => {
                    tokenspeed::outputs(frames.first().map_or(&[][..], Vec::as_slice))
                }
            };
            match read {
                Ok(outputs) => self.deliver(outputs),
                Err(err) => {
                    tracing::warn!(worker = %self.settings.worker, rank, error = %err, "unreadable engine output dropped");
                }
            }
        }
    }

    /// Hands each step to its request; outputs of requests that ended (aborted, failed)
    /// are dropped.
    fn deliver(&mut self, outputs: wire::Outputs<'_>) {
        for out in outputs.outputs {
            let Some(pending) = self.requests.get_mut(out.request_id) else {
                continue;
            };
            if let Some(n) = out.prompt_tokens {
                pending.prompt_tokens = n;
            }
            let ids = out.new_token_ids;
            if !ids.is_empty() {
                pending.generated = pending
                    .generated
                    .saturating_add(u32::try_from(ids.len()).unwrap_or(u32::MAX));
                let logprobs = out
                    .logprobs
                    .into_iter()
                    .map(|p| {
                        Some(TokenLogprob {
                            logprob: p.logprob,
                            top: p.top,
                        })
                    })
                    .collect();
                let _ = pending.events.send(Ok(Event::Chunk {
                    index: pending.index,
                    ids,
                    prompt_tokens: pending.prompt_tokens,
                    logprobs,
                }));
            }
            let Some(finish) = out.finish else {
                continue;
            };
            let Some(pending) = self.requests.remove(out.request_id) else {
                continue;
            };
            self.release(pending.rank);
            self.forget_child(out.request_id, &pending);
            let runtime = self.settings.protocol.runtime();
            let last = match finish {
                Finish::Stop | Finish::Repetition => Ok(Event::Complete(ended(&pending, "stop"))),
                Finish::Length => Ok(Event::Complete(ended(&pending, "length"))),
                Finish::Abort => Ok(Event::Error(EngineError {
                    message: format!(
                        "the {runtime} engine aborted the request (shutting down or paused)"
                    ),
                    blames_request: false,
                })),
                Finish::Error => {
                    let error = out.error.unwrap_or_default();
                    Ok(Event::Error(EngineError {
                        message: if error.message.is_empty() {
                            format!("the {runtime} engine failed the request")
                        } else {
                            format!("{runtime} engine: {}", error.message)
                        },
                        blames_request: error.code == "validation_error",
                    }))
                }
            };
            let _ = pending.events.send(last);
        }
    }

    /// The link is dropped: requests still queued are told, sockets close.
    fn close(mut self) {
        for (_, pending) in self.requests.drain() {
            let _ = pending.events.send(Err(Failure::Unreachable(
                "the engine link has closed".into(),
            )));
        }
        self.state.live.send_replace(0);
        tracing::info!(worker = %self.settings.worker, "ZMQ worker link closed");
    }
}

fn ended(pending: &Pending, reason: &str) -> Complete {
    Complete {
        completion_tokens: pending.generated,
        ..Complete::new(pending.index, reason.to_owned(), pending.prompt_tokens)
    }
}

/// A rank's identity on the ROUTERs (`rank.to_bytes(2, "little")`).
fn identity(rank: u16) -> [u8; 2] {
    rank.to_le_bytes()
}

/// The next whole message waiting on `socket`, if any.
fn recv(socket: &zmq::Socket) -> Option<Vec<Vec<u8>>> {
    socket.recv_multipart(zmq::DONTWAIT).ok()
}
