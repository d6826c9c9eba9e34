//! One connection after its negotiation: a [`Transmission`], an event source and a
//! handler of a closed [`Event`] enum, as in rust-analyzer's main loop.
//!
//! [`Transmission::next_event`] holds the one `select!` the connection waits in and only
//! says what happened; [`Transmission::handle_event`] acts on it and then starts the
//! next request, if one is ready. The state the two share (the requests in flight, the
//! replies waiting for the socket, the request waiting for its payload budget, the socket
//! watch, the shutdown deadline and the pace replies must keep) is the struct's, so that
//! each step reads as a method rather than as an arm of one long loop.
//!
//! The wait is cancel-safe, and must stay so: `select!` drops the branches that lose, so
//! each branch is a future that loses nothing when dropped (`fill_buf` keeps what it read
//! in the reader's buffer, a `writev` that did not complete wrote nothing, a finished
//! request's reply stays in [`InFlight`], the budget wait is kept across waits). Reading
//! the rest of a request is not cancel-safe; it happens in the handler, raced only
//! against the shutdown grace (after which the connection closes anyway) and the stall
//! timeout (after which it closes too).

use std::io::{self, IoSlice};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, Sleep};

use super::queues::{
    InFlight, MAX_IOSLICES, OUTPUT_HIGH_WATER_BYTES, OUTPUT_UNBUDGETED_BYTES, Output, Reply,
};
use super::request::{
    BudgetWait, MIN_BYTES_PER_SEC, PendingPayload, far_future, grace_over, is_bulk, is_stall,
    later_by, payload_time, read_head, read_payload, reply_error, run, stalled, too_slow,
    wait_budget,
};
use super::spin::{Spin, SpunRead};
use super::{ConnectionError, Inner, ServerLimits, budget_units_of};
use crate::export::{Errno, Export};
use crate::handshake::Negotiated;
use crate::transmission::{TransmissionContext, error_frame};

/// What woke the connection task: one arm of [`Transmission::next_event`]'s `select!`.
pub(super) enum Event {
    /// At least one request in flight finished; its reply waits in [`InFlight`].
    Completed,
    /// A `writev` of queued replies returned.
    Wrote(io::Result<usize>),
    /// The reader holds the start of a request (`true`), or the stream ended (`false`).
    Readable(io::Result<bool>),
    /// The payload budget admits the pending request (`None`: the budget was closed).
    Budget(Option<OwnedSemaphorePermit>),
    /// Shutdown began (the loop notes the deadline before its next wait).
    Shutdown,
    /// The grace period after shutdown is over.
    GraceOver,
    /// Time to check that queued replies moved into the socket within the stall timeout.
    StallCheck,
}

/// A request ready to run: its header (and where its WRITE payload waits in the socket)
/// and its share of the payload budget, if it needs one.
type Admitted = (PendingPayload, Option<OwnedSemaphorePermit>);

/// The transmission phase of one connection: what its task reads, runs and writes.
///
/// Fields drop in the order they are declared, and that order is kept on purpose: the
/// budget wait, the pending request, the queued replies and the requests in flight go
/// first (giving their shares of the payload budget back), then the socket watch (its
/// busy mark), and the socket's halves last.
pub(super) struct Transmission<E, W> {
    pace: ReplyPace,
    /// When the connection closes after shutdown began (`None`: shutdown has not).
    deadline: Option<Instant>,
    /// How the connection ends; an error may be noted while what is in flight finishes.
    result: Result<(), ConnectionError>,
    /// Whether requests may still be read (false once the client disconnects, sends
    /// `NBD_CMD_DISC` or falls out of sync).
    reading: bool,
    /// The wait for the payload budget of `pending`.
    budget_wait: Option<BudgetWait>,
    /// A request whose WRITE payload or READ reply waits for the payload budget.
    pending: Option<PendingPayload>,
    /// The payload budget shared by all connections.
    budget: Arc<Semaphore>,
    out: Output,
    inflight: InFlight<'static>,
    ctx: TransmissionContext,
    /// The export's [`Export::write_chunk_bytes`], asked once.
    chunk_bytes: u32,
    export: Arc<E>,
    limits: ServerLimits,
    /// The runtime bulk transfers run on (`None`: this one).
    bulk: Option<tokio::runtime::Handle>,
    spin: Option<Spin>,
    shutdown_rx: watch::Receiver<bool>,
    writer: W,
    reader: BufReader<SpunRead>,
}

/// The check that queued replies move into the socket at [`MIN_BYTES_PER_SEC`] or
/// faster, measured over each stall timeout: a client that stops reading, or reads a byte
/// now and then, would otherwise keep the connection, and the budget its READ replies
/// hold, for ever. `progress` is when the queue last emptied, filled from empty or moved
/// a window's worth of bytes (`moved` since then); one timer, moved only when it fires,
/// checks it, so a reply costs no timer registration.
struct ReplyPace {
    progress: Instant,
    moved: u64,
    window_bytes: u64,
    /// Whether replies were queued at the last look (the timer runs only then).
    queued: bool,
}

impl ReplyPace {
    fn new(stall_timeout: std::time::Duration) -> ReplyPace {
        ReplyPace {
            progress: Instant::now(),
            moved: 0,
            window_bytes: (stall_timeout.as_secs_f64() * MIN_BYTES_PER_SEC as f64) as u64,
            queued: false,
        }
    }

    /// Notes whether replies are queued; progress counts from when the queue fills.
    fn note_queue(&mut self, empty: bool) {
        if empty {
            self.queued = false;
        } else if !self.queued {
            self.queued = true;
            self.progress = Instant::now();
            self.moved = 0;
        }
    }

    /// Notes `n` bytes written; `empty`: the queue emptied with them.
    fn note_written(&mut self, n: usize, empty: bool) {
        self.moved += n as u64;
        if empty || self.moved >= self.window_bytes {
            self.progress = Instant::now();
            self.moved = 0;
        }
    }
}

impl<E: Export, W: AsyncWrite + Unpin + Send + 'static> Transmission<E, W> {
    /// The transmission of `negotiated` over `reader` and `writer`, with the server's
    /// limits, exports and payload budget (`server`).
    pub(super) fn new(
        server: &Inner<E>,
        reader: BufReader<SpunRead>,
        writer: W,
        negotiated: Negotiated,
        shutdown_rx: watch::Receiver<bool>,
        spin: Option<Spin>,
        bulk: Option<tokio::runtime::Handle>,
    ) -> Self {
        let limits = server.limits;
        let info = &server.infos[negotiated.export_index];
        let export = Arc::clone(&server.exports[negotiated.export_index].export);
        let mut features = info.features;
        features.read_only |= negotiated.read_only;
        let chunk_bytes = export.write_chunk_bytes();
        let ctx = TransmissionContext {
            size_bytes: negotiated.size_bytes,
            features,
            block_sizes: info.block_sizes,
            structured_replies: negotiated.structured_replies,
            base_allocation: negotiated.base_allocation,
        };
        Transmission {
            export,
            ctx,
            limits,
            chunk_bytes,
            budget: Arc::clone(&server.payload_budget),
            bulk,
            reader,
            writer,
            shutdown_rx,
            spin,
            inflight: InFlight::default(),
            out: Output::default(),
            pending: None,
            budget_wait: None,
            reading: true,
            result: Ok(()),
            deadline: None,
            pace: ReplyPace::new(limits.stall_timeout),
        }
    }

    /// Serves requests until the client leaves, the grace period after shutdown ends or
    /// the connection fails, then closes the writer.
    pub(super) async fn serve(mut self) -> Result<(), ConnectionError> {
        let stall_check = tokio::time::sleep_until(self.pace.progress + self.limits.stall_timeout);
        tokio::pin!(stall_check);
        loop {
            if self.deadline.is_none() && *self.shutdown_rx.borrow_and_update() {
                self.deadline = Some(later_by(self.limits.shutdown_grace));
            }
            if !self.reading && self.inflight.is_empty() && self.out.is_empty() {
                break;
            }
            let event = self.next_event(stall_check.as_mut()).await;
            if self
                .handle_event(event, stall_check.as_mut())
                .await
                .is_break()
            {
                break;
            }
        }
        // Best effort: the client may already be gone, or may read nothing more (a TLS
        // close waits for the socket to take its alert), so it is bounded too.
        let close_within = self.limits.stall_timeout.min(self.limits.shutdown_grace);
        let _ = tokio::time::timeout(close_within, self.writer.shutdown()).await;
        std::mem::replace(&mut self.result, Ok(()))
    }

    /// Waits for what happens next: watches the socket briefly first when the connection
    /// is idle (see [`Spin`]), then waits in one `select!` of cancel-safe futures.
    async fn next_event(&mut self, stall_check: Pin<&mut Sleep>) -> Event {
        self.pace.note_queue(self.out.is_empty());
        let can_read = self.reading
            && self.pending.is_none()
            && self.inflight.len() < self.limits.max_inflight_per_connection
            && self.out.held_bytes() < OUTPUT_HIGH_WATER_BYTES
            && self.out.unbudgeted_bytes() < OUTPUT_UNBUDGETED_BYTES;
        let idle = self.inflight.is_empty() && self.out.is_empty();
        if let Some(spin) = self.spin.as_mut() {
            spin.set_busy(!idle);
        }
        if can_read
            && idle
            && self.reader.buffer().is_empty()
            && self.deadline.is_none()
            && let Some(spin) = self.spin.as_mut()
            && spin.wait_briefly(self.reader.get_mut(), self.export.idle_yield())
            && !self.reader.get_ref().holds_bytes()
        {
            // The next request arrived while spinning but is still in the socket (the
            // spin only peeked): let the reactor see it (a yielded task runs again after
            // the runtime polls its I/O driver). Bytes the spin read itself are handed to
            // the reader below with no system call.
            tokio::task::yield_now().await;
        }
        // Requests already in the read buffer are taken first (no system call), so a
        // burst of pipelined requests completes together and its replies share one
        // writev. Otherwise: completions, then writes, then new requests.
        if can_read && !self.reader.buffer().is_empty() {
            return Event::Readable(Ok(true));
        }
        let grace_end = self.deadline.unwrap_or_else(far_future);
        let mut slices = [IoSlice::new(&[]); MAX_IOSLICES];
        let nslices = self.out.fill_slices(&mut slices);
        tokio::select! {
            biased;
            () = self.inflight.completions(), if !self.inflight.is_empty() => Event::Completed,
            wrote = self.writer.write_vectored(&slices[..nslices]), if nslices > 0 => {
                Event::Wrote(wrote)
            }
            permit = wait_budget(&mut self.budget_wait), if self.budget_wait.is_some() => {
                Event::Budget(permit)
            }
            filled = self.reader.fill_buf(), if can_read => {
                Event::Readable(filled.map(|b| !b.is_empty()))
            }
            _ = self.shutdown_rx.changed(), if self.deadline.is_none() => Event::Shutdown,
            () = tokio::time::sleep_until(grace_end), if self.deadline.is_some() => {
                Event::GraceOver
            }
            () = stall_check, if self.pace.queued => Event::StallCheck,
        }
    }

    /// Acts on `event`, then starts the next request if one is ready (one the budget now
    /// admits, or a new one whose first bytes arrived). `Break`: the connection ends.
    async fn handle_event(
        &mut self,
        event: Event,
        stall_check: Pin<&mut Sleep>,
    ) -> ControlFlow<()> {
        let request_ready = matches!(event, Event::Readable(Ok(true)));
        if request_ready && let Some(spin) = self.spin.as_mut() {
            spin.note_request();
        }
        let mut budget_ready = None;
        match event {
            Event::Completed => self.inflight.drain_done(&mut self.out),
            Event::Wrote(Ok(0)) => return self.end(io::Error::from(io::ErrorKind::WriteZero)),
            Event::Wrote(Ok(n)) => self.wrote(n).await?,
            Event::Wrote(Err(err)) => return self.end(err),
            Event::Readable(Ok(true)) => {}
            Event::Readable(Ok(false)) => self.reading = false,
            Event::Readable(Err(err)) => {
                self.reading = false;
                self.result = Err(err.into());
            }
            Event::Budget(permit) => {
                self.budget_wait = None;
                match permit {
                    Some(permit) => budget_ready = Some(permit),
                    None => return self.end(io::Error::other("the payload budget was closed")),
                }
            }
            Event::Shutdown => {}
            Event::GraceOver => return ControlFlow::Break(()),
            Event::StallCheck => self.check_pace(stall_check)?,
        }
        let next = if let Some(permit) = budget_ready {
            let head = self
                .pending
                .take()
                .expect("the budget is waited for only with a request pending");
            Some((head, Some(permit)))
        } else if request_ready {
            self.read_request().await?
        } else {
            None
        };
        match next {
            Some((head, permit)) => self.start(head, permit).await,
            None => ControlFlow::Continue(()),
        }
    }

    /// Notes that the connection ends with `err`.
    fn end<T>(&mut self, err: impl Into<ConnectionError>) -> ControlFlow<(), T> {
        self.result = Err(err.into());
        ControlFlow::Break(())
    }

    /// `n` bytes of queued replies went into the socket.
    async fn wrote(&mut self, n: usize) -> ControlFlow<()> {
        self.out.advance(n);
        self.pace.note_written(n, self.out.is_empty());
        // Sockets need no flush (it returns at once); a buffered writer such as stdout
        // does, or the reply would sit in its buffer. A TLS stream's flush waits until
        // the socket takes every record, so it is bounded like a write.
        if self.out.is_empty() {
            match tokio::time::timeout(self.limits.stall_timeout, self.writer.flush()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return self.end(err),
                Err(_) => return self.end(stalled("flushing replies", self.limits.stall_timeout)),
            }
        }
        ControlFlow::Continue(())
    }

    /// The stall timer fired: ends the connection if its replies moved too slowly, or sets
    /// the timer for the next check.
    fn check_pace(&mut self, stall_check: Pin<&mut Sleep>) -> ControlFlow<()> {
        let stall = self.limits.stall_timeout;
        if self.pace.progress.elapsed() >= stall {
            return self.end(too_slow(format!(
                "the client took its replies slower than {} KiB/s for {stall:?}",
                MIN_BYTES_PER_SEC / 1024,
            )));
        }
        stall_check.reset(self.pace.progress + stall);
        ControlFlow::Continue(())
    }

    /// Reads a new request's header, whose first bytes are in the reader, and takes its
    /// share of the payload budget. `Continue(None)`: nothing to run now (the request
    /// waits for the budget, or the read failed and the connection reads no more).
    ///
    /// Reading the rest of a request is not cancel-safe; only the grace deadline may
    /// interrupt it, and then the connection closes anyway. A client that stops sending
    /// midway is cut off after the stall timeout, finishing nothing more: it may hold
    /// budget that other connections wait for.
    async fn read_request(&mut self) -> ControlFlow<(), Option<Admitted>> {
        let grace = self.limits.shutdown_grace;
        let read = tokio::select! {
            read = read_head(&mut self.reader, &self.ctx, &self.limits) => read,
            () = grace_over(&mut self.shutdown_rx, self.deadline, grace) => {
                return ControlFlow::Break(());
            }
        };
        match read {
            Ok(head) => ControlFlow::Continue(self.admit(head)),
            Err(err) if is_stall(&err) => self.end(err),
            Err(err) => {
                // Out of sync or cut off: finish what is in flight, read no more.
                self.reading = false;
                self.result = Err(err);
                ControlFlow::Continue(None)
            }
        }
    }

    /// `head` with its share of the payload budget, or `None` when the budget cannot
    /// hold it now: the connection then answers what completes and reads nothing more
    /// until it fits.
    fn admit(&mut self, head: PendingPayload) -> Option<Admitted> {
        let bytes = head.budget_bytes(self.limits.max_request_bytes);
        if bytes == 0 {
            return Some((head, None));
        }
        let units = budget_units_of(bytes);
        match Arc::clone(&self.budget).try_acquire_many_owned(units) {
            Ok(permit) => Some((head, Some(permit))),
            Err(_) => {
                // One wait, kept until it is served: tokio's semaphore serves its oldest
                // waiter first, and a wait made anew would queue last again.
                self.budget_wait =
                    Some(Box::pin(Arc::clone(&self.budget).acquire_many_owned(units)));
                self.pending = Some(head);
                None
            }
        }
    }

    /// Reads an admitted request's WRITE payload, if it has one, and runs it (or
    /// answers it at once: an invalid request, or any after shutdown began).
    async fn start(
        &mut self,
        head: PendingPayload,
        permit: Option<OwnedSemaphorePermit>,
    ) -> ControlFlow<()> {
        let payload = if head.len > 0 {
            match self.receive_payload(&head).await? {
                Some(data) => Some(data),
                None => return ControlFlow::Continue(()),
            }
        } else {
            None
        };
        let PendingPayload { hdr, checked, .. } = head;
        if hdr.command == crate::proto::cmd::DISC {
            self.reading = false;
            return ControlFlow::Continue(());
        }
        if self.deadline.is_some() {
            self.out
                .push(reply_error(&hdr, Errno::Shutdown, &self.ctx), None);
            return ControlFlow::Continue(());
        }
        let cookie = hdr.cookie;
        match checked {
            Ok(request) => self.put_in_flight(request, cookie, payload, permit),
            Err(errno) => self.out.push(reply_error(&hdr, errno, &self.ctx), None),
        }
        ControlFlow::Continue(())
    }

    /// Reads `head`'s WRITE payload. The whole payload, not only each read of it, has a
    /// deadline (see `payload_time`): the request holds its share of the budget
    /// meanwhile. `Continue(None)`: the read failed, and the connection reads no more.
    async fn receive_payload(
        &mut self,
        head: &PendingPayload,
    ) -> ControlFlow<(), Option<Vec<Bytes>>> {
        let stall = self.limits.stall_timeout;
        let grace = self.limits.shutdown_grace;
        let whole = payload_time(head.len, stall);
        let read = tokio::select! {
            read = read_payload(
                &mut self.reader,
                head.len,
                head.hdr.offset,
                self.chunk_bytes,
                stall,
            ) => read,
            () = tokio::time::sleep(whole) => Err(too_slow(format!(
                "a WRITE payload of {} bytes took longer than {whole:?} (the stall \
                 timeout, then {} KiB/s)",
                head.len,
                MIN_BYTES_PER_SEC / 1024
            ))),
            () = grace_over(&mut self.shutdown_rx, self.deadline, grace) => {
                return ControlFlow::Break(());
            }
        };
        match read {
            Ok(data) => ControlFlow::Continue(Some(data)),
            Err(err) if is_stall(&err) => self.end(err),
            Err(err) => {
                self.reading = false;
                self.result = Err(err);
                ControlFlow::Continue(None)
            }
        }
    }

    /// Adds a valid request to the ones in flight.
    fn put_in_flight(
        &mut self,
        request: crate::transmission::Request,
        cookie: u64,
        payload: Option<Vec<Bytes>>,
        permit: Option<OwnedSemaphorePermit>,
    ) {
        let export = Arc::clone(&self.export);
        let structured = self.ctx.structured_replies;
        if !is_bulk(&request) {
            self.inflight.push(Box::pin(async move {
                run(&*export, request, cookie, payload, structured, permit).await
            }));
            return;
        }
        // Large transfers are mostly memory copies: run them as their own task so several
        // can proceed on other cores at once.
        let work = async move { run(&*export, request, cookie, payload, structured, permit).await };
        let task = match &self.bulk {
            Some(runtime) => runtime.spawn(work),
            None => tokio::spawn(work),
        };
        self.inflight.push(Box::pin(async move {
            task.await.unwrap_or_else(|_| Reply {
                frame: error_frame(cookie, Errno::Io, structured),
                budget: None,
            })
        }));
    }
}
