//! The handshake: fixed newstyle negotiation as a state machine that does no I/O.
//!
//! The server writes [`greeting`], then feeds every byte it receives to
//! [`Negotiation::step`] and writes whatever the step appended to `out`. A step never
//! consumes more than the current message, so no byte of the transmission phase is ever
//! swallowed by the handshake. Because it is pure, the whole handshake is fuzzed and
//! unit-tested without sockets.

use thiserror::Error;

use crate::export::{BlockSizes, Features};
use crate::proto::{
    BASE_ALLOCATION, BASE_ALLOCATION_ID, GREETING_LEN_BYTES, IHAVEOPT, NBDMAGIC,
    OPTION_HEADER_LEN_BYTES, OPTION_REPLY_MAGIC, STRING_MAX_BYTES, client_flag, handshake_flag,
    info, opt, rep, tx_flag,
};

/// The 18-byte server greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags
/// (`FIXED_NEWSTYLE | NO_ZEROES`).
pub fn greeting() -> [u8; GREETING_LEN_BYTES] {
    let mut g = [0u8; GREETING_LEN_BYTES];
    g[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    g[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    let flags = handshake_flag::FIXED_NEWSTYLE | handshake_flag::NO_ZEROES;
    g[16..18].copy_from_slice(&flags.to_be_bytes());
    g
}

/// What negotiation needs to know about one export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// The export's name (unique per server).
    pub name: String,
    /// Human-readable description, sent in `LIST` and `NBD_INFO_DESCRIPTION`.
    pub description: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Capabilities, from which the transmission flags are computed.
    pub features: Features,
    /// Block size constraints, sent in `NBD_INFO_BLOCK_SIZE`.
    pub block_sizes: BlockSizes,
}

/// The transmission flags for an export on a connection. They depend on the connection:
/// `SEND_DF` only exists once structured replies were negotiated.
pub fn transmission_flags(features: &Features, structured_replies: bool) -> u16 {
    let mut flags = tx_flag::HAS_FLAGS;
    let writable = !features.read_only;
    if features.read_only {
        flags |= tx_flag::READ_ONLY;
    }
    if features.flush {
        flags |= tx_flag::SEND_FLUSH | tx_flag::SEND_FUA;
    }
    if features.rotational {
        flags |= tx_flag::ROTATIONAL;
    }
    if features.trim && writable {
        flags |= tx_flag::SEND_TRIM;
    }
    if features.write_zeroes && writable {
        flags |= tx_flag::SEND_WRITE_ZEROES;
        if features.fast_zero {
            flags |= tx_flag::SEND_FAST_ZERO;
        }
    }
    if structured_replies {
        flags |= tx_flag::SEND_DF;
    }
    if features.multi_conn {
        flags |= tx_flag::CAN_MULTI_CONN;
    }
    if features.cache {
        flags |= tx_flag::SEND_CACHE;
    }
    flags
}

/// Limits applied during negotiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NegotiationLimits {
    /// Option payloads longer than this end the connection (a 4 KiB name plus a few
    /// queries fits easily; the cap keeps a client from making the server buffer
    /// gigabytes).
    pub max_option_bytes: u32,
}

impl Default for NegotiationLimits {
    fn default() -> Self {
        NegotiationLimits {
            max_option_bytes: 64 * 1024,
        }
    }
}

/// The server's TLS mode, with nbdkit's meanings (the spec's NOTLS, SELECTIVETLS and
/// FORCEDTLS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// No TLS: `STARTTLS` is refused by policy and `ERR_TLS_REQD` is never sent.
    #[default]
    Off,
    /// TLS at the client's choice; exports whose access rules name client identities
    /// answer `ERR_TLS_REQD` until it is on.
    On,
    /// Every option but `STARTTLS` and `ABORT` answers `ERR_TLS_REQD` until TLS is on.
    Require,
}

/// What one client may do with one export, as the server's access rules decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Read and write (as far as the export itself allows).
    #[default]
    ReadWrite,
    /// Read only: the export is offered with `NBD_FLAG_READ_ONLY` and writes fail `EPERM`.
    ReadOnly,
    /// Refused as things stand, but a rule would admit the client under TLS (with a
    /// certificate): answered `ERR_TLS_REQD` while TLS is not on.
    NeedsTls,
    /// Refused: not listed, and `NBD_OPT_LIST` does not show it.
    Denied,
}

/// The outcome of a successful negotiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Index of the chosen export in the slice given to [`Negotiation::new`].
    pub export_index: usize,
    /// The access rules made the export read-only for this client.
    pub read_only: bool,
    /// Structured replies were negotiated.
    pub structured_replies: bool,
    /// `base:allocation` was selected for this export (BLOCK_STATUS allowed).
    pub base_allocation: bool,
    /// The transmission flags sent to the client.
    pub transmission_flags: u16,
    /// The export's size as sent to the client: the connection keeps it.
    pub size_bytes: u64,
}

/// What the caller does after a step. In every case it first writes `out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing consumed: wait until the input holds at least this many bytes.
    NeedMore(usize),
    /// This many input bytes were consumed; keep going.
    Consumed(usize),
    /// Negotiation ended after `consumed` bytes; transmission starts.
    Done {
        /// Bytes of input consumed by this step.
        consumed: usize,
        /// The negotiated parameters.
        negotiated: Negotiated,
    },
    /// The client sent `NBD_OPT_ABORT` (the ACK is in `out`); close afterwards.
    Abort {
        /// Bytes of input consumed by this step.
        consumed: usize,
    },
    /// The client sent `NBD_OPT_STARTTLS` and it was accepted (the ACK is in `out`): write
    /// it, run the TLS handshake, call [`Negotiation::tls_started`] and go on over TLS. No
    /// byte after this message may be read in plaintext.
    StartTls {
        /// Bytes of input consumed by this step.
        consumed: usize,
    },
}

/// Errors that end the connection without a reply (the spec's "hard disconnect").
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NegotiationError {
    /// The client did not set `NBD_FLAG_C_FIXED_NEWSTYLE`; larch only speaks fixed newstyle.
    #[error("client does not speak fixed newstyle (client flags {0:#x})")]
    NotFixedNewstyle(u32),
    /// The client set a flag the server did not advertise.
    #[error("unknown client flags {0:#x}")]
    UnknownClientFlags(u32),
    /// An option did not start with `IHAVEOPT`.
    #[error("bad option magic {0:#018x}")]
    BadOptionMagic(u64),
    /// An option's payload is longer than the configured limit.
    #[error("option {option} payload of {length_bytes} bytes exceeds the limit of {max_bytes}")]
    OptionTooLong {
        /// The option number.
        option: u32,
        /// Its declared payload length.
        length_bytes: u32,
        /// The configured limit.
        max_bytes: u32,
    },
    /// `NBD_OPT_EXPORT_NAME` named no export; the protocol has no way to say so but closing.
    #[error("NBD_OPT_EXPORT_NAME for unknown export {0:?}")]
    UnknownExport(String),
    /// `NBD_OPT_EXPORT_NAME` before `STARTTLS` on a server that requires TLS (or for an
    /// export that needs it); the option cannot fail, so the connection closes.
    #[error("NBD_OPT_EXPORT_NAME without TLS, which is required")]
    TlsRequired,
    /// `NBD_OPT_EXPORT_NAME` for an export the access rules refuse this client.
    #[error("NBD_OPT_EXPORT_NAME for export {0:?}, which this client may not use")]
    ExportDenied(String),
    /// `NBD_OPT_EXPORT_NAME` while the server shuts down: the option cannot fail, so the
    /// connection closes.
    #[error("NBD_OPT_EXPORT_NAME while the server is shutting down")]
    ShuttingDown,
    /// `step` was called after negotiation ended.
    #[error("negotiation already finished")]
    Finished,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    ClientFlags,
    Options,
    Finished,
}

/// Metadata contexts selected by `NBD_OPT_SET_META_CONTEXT`, bound to an export name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MetaSelection {
    export_name: Vec<u8>,
    base_allocation: bool,
}

/// The server side of fixed newstyle negotiation for one connection.
#[derive(Debug)]
pub struct Negotiation<'a> {
    exports: &'a [ExportInfo],
    limits: NegotiationLimits,
    state: State,
    no_zeroes: bool,
    structured_replies: bool,
    meta: Option<MetaSelection>,
    shutting_down: bool,
    tls_mode: TlsMode,
    tls_active: bool,
    /// Per export (same order as `exports`); missing entries are [`Access::Denied`].
    access: Vec<Access>,
}

/// Why an option was refused: the reply type and a message for humans.
struct OptError {
    reply_type: u32,
    message: &'static str,
}

impl OptError {
    fn invalid(message: &'static str) -> OptError {
        OptError {
            reply_type: rep::ERR_INVALID,
            message,
        }
    }
}

/// Outcome of one option.
enum OptOutcome {
    Continue,
    Done(Negotiated),
    Abort,
    StartTls,
}

impl<'a> Negotiation<'a> {
    /// Starts a negotiation offering `exports` (the greeting must already be sent).
    pub fn new(exports: &'a [ExportInfo], limits: NegotiationLimits) -> Negotiation<'a> {
        Negotiation {
            exports,
            limits,
            state: State::ClientFlags,
            no_zeroes: false,
            structured_replies: false,
            meta: None,
            shutting_down: false,
            tls_mode: TlsMode::Off,
            tls_active: false,
            access: vec![Access::ReadWrite; exports.len()],
        }
    }

    /// Sets the TLS mode (before the first step; the default is [`TlsMode::Off`]).
    pub fn with_tls(mut self, mode: TlsMode) -> Negotiation<'a> {
        self.tls_mode = mode;
        self
    }

    /// Sets what this client may do with each export (in the order of the exports; the
    /// default is read-write for all). Called again after TLS starts, when the client's
    /// identity is known.
    pub fn set_access(&mut self, access: Vec<Access>) {
        self.access = access;
    }

    /// TLS is on after a [`Step::StartTls`]. What was negotiated in plaintext (structured
    /// replies, metadata contexts) is forgotten: a man in the middle could have chosen it.
    pub fn tls_started(&mut self) {
        self.tls_active = true;
        self.structured_replies = false;
        self.meta = None;
    }

    /// Whether TLS is on.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// From now on, answer every option but `ABORT` with `NBD_REP_ERR_SHUTDOWN`.
    pub fn set_shutting_down(&mut self) {
        self.shutting_down = true;
    }

    /// Consumes at most one message from the front of `input`, appending any reply to
    /// `out`. Errors mean: close the connection without writing anything more.
    pub fn step(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Step, NegotiationError> {
        match self.state {
            State::Finished => Err(NegotiationError::Finished),
            State::ClientFlags => {
                let Some(word) = input.get(0..4) else {
                    return Ok(Step::NeedMore(4));
                };
                let flags = be_u32(word);
                if flags & !(client_flag::FIXED_NEWSTYLE | client_flag::NO_ZEROES) != 0 {
                    return Err(self.fail(NegotiationError::UnknownClientFlags(flags)));
                }
                if flags & client_flag::FIXED_NEWSTYLE == 0 {
                    return Err(self.fail(NegotiationError::NotFixedNewstyle(flags)));
                }
                self.no_zeroes = flags & client_flag::NO_ZEROES != 0;
                self.state = State::Options;
                Ok(Step::Consumed(4))
            }
            State::Options => self.option_step(input, out),
        }
    }

    fn fail(&mut self, err: NegotiationError) -> NegotiationError {
        self.state = State::Finished;
        err
    }

    fn option_step(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Step, NegotiationError> {
        let Some(header) = input.get(0..OPTION_HEADER_LEN_BYTES) else {
            return Ok(Step::NeedMore(OPTION_HEADER_LEN_BYTES));
        };
        let magic = be_u64(&header[0..8]);
        let option = be_u32(&header[8..12]);
        let length = be_u32(&header[12..16]);
        if magic != IHAVEOPT {
            return Err(self.fail(NegotiationError::BadOptionMagic(magic)));
        }
        if length > self.limits.max_option_bytes {
            return Err(self.fail(NegotiationError::OptionTooLong {
                option,
                length_bytes: length,
                max_bytes: self.limits.max_option_bytes,
            }));
        }
        let total = OPTION_HEADER_LEN_BYTES + length as usize;
        let Some(data) = input.get(OPTION_HEADER_LEN_BYTES..total) else {
            return Ok(Step::NeedMore(total));
        };
        match self.handle_option(option, data, out)? {
            OptOutcome::Continue => Ok(Step::Consumed(total)),
            OptOutcome::Done(negotiated) => {
                self.state = State::Finished;
                Ok(Step::Done {
                    consumed: total,
                    negotiated,
                })
            }
            OptOutcome::Abort => {
                self.state = State::Finished;
                Ok(Step::Abort { consumed: total })
            }
            OptOutcome::StartTls => Ok(Step::StartTls { consumed: total }),
        }
    }

    fn handle_option(
        &mut self,
        option: u32,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<OptOutcome, NegotiationError> {
        if option == opt::ABORT {
            put_option_reply(out, option, rep::ACK, &[]);
            return Ok(OptOutcome::Abort);
        }
        if self.shutting_down {
            if option == opt::EXPORT_NAME {
                return Err(self.fail(NegotiationError::ShuttingDown));
            }
            put_error(out, option, rep::ERR_SHUTDOWN, "server is shutting down");
            return Ok(OptOutcome::Continue);
        }
        if option == opt::STARTTLS {
            return Ok(self.start_tls(data, out));
        }
        if self.tls_mode == TlsMode::Require && !self.tls_active {
            if option == opt::EXPORT_NAME {
                return Err(self.fail(NegotiationError::TlsRequired));
            }
            put_error(
                out,
                option,
                rep::ERR_TLS_REQD,
                "TLS is required: send NBD_OPT_STARTTLS first",
            );
            return Ok(OptOutcome::Continue);
        }
        let result = match option {
            opt::EXPORT_NAME => return self.export_name(data, out),
            opt::LIST => self.list(data, out),
            opt::INFO | opt::GO => self.info_or_go(option, data, out),
            opt::STRUCTURED_REPLY => {
                if data.is_empty() {
                    self.structured_replies = true;
                    put_option_reply(out, option, rep::ACK, &[]);
                    Ok(None)
                } else {
                    Err(OptError::invalid("STRUCTURED_REPLY takes no payload"))
                }
            }
            opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => {
                self.meta_context(option, data, out).map(|()| None)
            }
            _ => Err(OptError {
                reply_type: rep::ERR_UNSUP,
                message: "option not supported",
            }),
        };
        match result {
            Ok(Some(negotiated)) => Ok(OptOutcome::Done(negotiated)),
            Ok(None) => Ok(OptOutcome::Continue),
            Err(e) => {
                put_error(out, option, e.reply_type, e.message);
                Ok(OptOutcome::Continue)
            }
        }
    }

    /// Finds an export by name; the empty name selects the export named "" or, failing
    /// that, the first one (the server's default export).
    fn find_export(&self, name: &[u8]) -> Option<usize> {
        if let Some(i) = self.exports.iter().position(|e| e.name.as_bytes() == name) {
            return Some(i);
        }
        if name.is_empty() && !self.exports.is_empty() {
            return Some(0);
        }
        None
    }

    /// `NBD_OPT_STARTTLS`: accepted once, when the server has TLS.
    fn start_tls(&mut self, data: &[u8], out: &mut Vec<u8>) -> OptOutcome {
        let refusal = if !data.is_empty() {
            Some((rep::ERR_INVALID, "STARTTLS takes no payload"))
        } else if self.tls_mode == TlsMode::Off {
            Some((rep::ERR_POLICY, "TLS is not enabled on this server"))
        } else if self.tls_active {
            Some((rep::ERR_INVALID, "TLS is already on"))
        } else {
            None
        };
        match refusal {
            Some((reply_type, message)) => {
                put_error(out, opt::STARTTLS, reply_type, message);
                OptOutcome::Continue
            }
            None => {
                put_option_reply(out, opt::STARTTLS, rep::ACK, &[]);
                OptOutcome::StartTls
            }
        }
    }

    fn access(&self, index: usize) -> Access {
        self.access.get(index).copied().unwrap_or(Access::Denied)
    }

    /// Whether this client may use export `index`: `Ok(read_only)` or the refusal.
    fn check_access(&self, index: usize) -> Result<bool, OptError> {
        match self.access(index) {
            Access::ReadWrite => Ok(false),
            Access::ReadOnly => Ok(true),
            // ERR_TLS_REQD only while it is true: TLS is offered and not yet on.
            Access::NeedsTls if self.tls_mode != TlsMode::Off && !self.tls_active => {
                Err(OptError {
                    reply_type: rep::ERR_TLS_REQD,
                    message: "this export needs TLS with a client certificate",
                })
            }
            Access::NeedsTls | Access::Denied => Err(OptError {
                reply_type: rep::ERR_POLICY,
                message: "this client may not use this export",
            }),
        }
    }

    fn export_name(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<OptOutcome, NegotiationError> {
        let Some(index) = self.find_export(data) else {
            let name = String::from_utf8_lossy(data).into_owned();
            return Err(self.fail(NegotiationError::UnknownExport(name)));
        };
        let read_only = match self.check_access(index) {
            Ok(read_only) => read_only,
            Err(refusal) if refusal.reply_type == rep::ERR_TLS_REQD => {
                return Err(self.fail(NegotiationError::TlsRequired));
            }
            Err(_) => {
                let name = self.exports[index].name.clone();
                return Err(self.fail(NegotiationError::ExportDenied(name)));
            }
        };
        let negotiated = self.negotiated(index, data, read_only);
        out.extend_from_slice(&self.exports[index].size_bytes.to_be_bytes());
        out.extend_from_slice(&negotiated.transmission_flags.to_be_bytes());
        if !self.no_zeroes {
            out.extend_from_slice(&[0u8; 124]);
        }
        Ok(OptOutcome::Done(negotiated))
    }

    fn negotiated(&self, index: usize, requested_name: &[u8], read_only: bool) -> Negotiated {
        let export = &self.exports[index];
        let mut features = export.features;
        features.read_only |= read_only;
        let base_allocation = self.structured_replies
            && export.features.block_status
            && self
                .meta
                .as_ref()
                .is_some_and(|m| m.base_allocation && m.export_name == requested_name);
        Negotiated {
            export_index: index,
            read_only,
            structured_replies: self.structured_replies,
            base_allocation,
            transmission_flags: transmission_flags(&features, self.structured_replies),
            size_bytes: export.size_bytes,
        }
    }

    fn list(&self, data: &[u8], out: &mut Vec<u8>) -> Result<Option<Negotiated>, OptError> {
        if !data.is_empty() {
            return Err(OptError::invalid("LIST takes no payload"));
        }
        for (index, export) in self.exports.iter().enumerate() {
            if self.check_access(index).is_err() {
                continue;
            }
            let mut item = Vec::with_capacity(4 + export.name.len() + export.description.len());
            item.extend_from_slice(&(export.name.len() as u32).to_be_bytes());
            item.extend_from_slice(export.name.as_bytes());
            item.extend_from_slice(export.description.as_bytes());
            put_option_reply(out, opt::LIST, rep::SERVER, &item);
        }
        put_option_reply(out, opt::LIST, rep::ACK, &[]);
        Ok(None)
    }

    fn info_or_go(
        &mut self,
        option: u32,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Negotiated>, OptError> {
        let mut r = Reader::new(data);
        let name = r
            .string_u32()
            .ok_or(OptError::invalid("malformed export name"))?;
        let count = r
            .u16()
            .ok_or(OptError::invalid("missing information request count"))?;
        let mut requests = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            requests.push(
                r.u16()
                    .ok_or(OptError::invalid("truncated information requests"))?,
            );
        }
        if !r.is_empty() {
            return Err(OptError::invalid(
                "trailing bytes after information requests",
            ));
        }
        let index = self.find_export(name).ok_or(OptError {
            reply_type: rep::ERR_UNKNOWN,
            message: "no such export",
        })?;
        let read_only = self.check_access(index)?;
        let negotiated = self.negotiated(index, name, read_only);
        let export = &self.exports[index];

        let mut item = Vec::with_capacity(14);
        item.extend_from_slice(&info::EXPORT.to_be_bytes());
        item.extend_from_slice(&export.size_bytes.to_be_bytes());
        item.extend_from_slice(&negotiated.transmission_flags.to_be_bytes());
        put_option_reply(out, option, rep::INFO, &item);
        if requests.contains(&info::NAME) {
            let mut item = info::NAME.to_be_bytes().to_vec();
            item.extend_from_slice(export.name.as_bytes());
            put_option_reply(out, option, rep::INFO, &item);
        }
        if requests.contains(&info::DESCRIPTION) && !export.description.is_empty() {
            let mut item = info::DESCRIPTION.to_be_bytes().to_vec();
            item.extend_from_slice(export.description.as_bytes());
            put_option_reply(out, option, rep::INFO, &item);
        }
        // Block sizes go out whether asked for or not: the spec allows it and clients
        // that did not ask simply ignore them.
        let sizes = export.block_sizes;
        let mut item = info::BLOCK_SIZE.to_be_bytes().to_vec();
        item.extend_from_slice(&sizes.minimum_bytes.to_be_bytes());
        item.extend_from_slice(&sizes.preferred_bytes.to_be_bytes());
        item.extend_from_slice(&sizes.maximum_bytes.to_be_bytes());
        put_option_reply(out, option, rep::INFO, &item);
        put_option_reply(out, option, rep::ACK, &[]);
        Ok((option == opt::GO).then_some(negotiated))
    }

    fn meta_context(
        &mut self,
        option: u32,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), OptError> {
        let setting = option == opt::SET_META_CONTEXT;
        if setting {
            // The spec: a SET replaces the previous selection even when it fails.
            self.meta = None;
        }
        if !self.structured_replies {
            return Err(OptError::invalid(
                "metadata contexts need structured replies first",
            ));
        }
        let mut r = Reader::new(data);
        let name = r
            .string_u32()
            .ok_or(OptError::invalid("malformed export name"))?;
        let count = r.u32().ok_or(OptError::invalid("missing query count"))?;
        let mut queries = Vec::new();
        for _ in 0..count {
            queries.push(r.string_u32().ok_or(OptError::invalid("malformed query"))?);
        }
        if !r.is_empty() {
            return Err(OptError::invalid("trailing bytes after queries"));
        }
        let index = self.find_export(name).ok_or(OptError {
            reply_type: rep::ERR_UNKNOWN,
            message: "no such export",
        })?;
        self.check_access(index)?;
        let supported = self.exports[index].features.block_status;
        let matches = |q: &[u8]| {
            q == BASE_ALLOCATION.as_bytes()
                // Listing accepts the namespace alone as a wildcard.
                || (!setting && q == b"base:")
        };
        let selected =
            supported && (queries.iter().any(|q| matches(q)) || (!setting && count == 0));
        if selected {
            let id = if setting { BASE_ALLOCATION_ID } else { 0 };
            let mut item = id.to_be_bytes().to_vec();
            item.extend_from_slice(BASE_ALLOCATION.as_bytes());
            put_option_reply(out, option, rep::META_CONTEXT, &item);
        }
        if setting {
            self.meta = Some(MetaSelection {
                export_name: name.to_vec(),
                base_allocation: selected,
            });
        }
        put_option_reply(out, option, rep::ACK, &[]);
        Ok(())
    }
}

/// Appends one option reply.
fn put_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

fn put_error(out: &mut Vec<u8>, option: u32, reply_type: u32, message: &str) {
    put_option_reply(out, option, reply_type, message.as_bytes());
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// A bounds-checked cursor over an option payload: every getter returns `None` rather
/// than reading past the end.
struct Reader<'d> {
    data: &'d [u8],
}

impl<'d> Reader<'d> {
    fn new(data: &'d [u8]) -> Reader<'d> {
        Reader { data }
    }

    fn take(&mut self, n: usize) -> Option<&'d [u8]> {
        if self.data.len() < n {
            return None;
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Some(head)
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(be_u32)
    }

    /// A u32 length followed by that many bytes, at most the spec's string limit.
    fn string_u32(&mut self) -> Option<&'d [u8]> {
        let len = self.u32()? as usize;
        if len > STRING_MAX_BYTES {
            return None;
        }
        self.take(len)
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

#[cfg(test)]
mod tests;
