//! Running under systemd: readiness notifications and socket activation.
//!
//! With `Type=notify` the service manager waits for [`notify_ready`] before it counts the
//! daemon as started, and [`notify_stopping`] tells it a shutdown is under way (the pool
//! then flushes, which `TimeoutStopSec` allows for). The messages go through the
//! `sd-notify` crate; without `NOTIFY_SOCKET` in the environment they are no-ops, so a
//! daemon started by hand sends nothing.
//!
//! With socket activation (`larch@.socket`) systemd binds the NBD and HTTP addresses and
//! passes the listening sockets as file descriptors 3, 4, ... with `LISTEN_PID`,
//! `LISTEN_FDS` and `LISTEN_FDNAMES` saying whose they are, how many, and what each is for
//! (sd_listen_fds(3)). [`receive_sockets`] takes them once, at the start of `larch serve`;
//! the listeners then take theirs with [`take_nbd_listeners`] and [`take_http_listener`].
//! The descriptors belong to the process, not to a call, which is why they are kept in one
//! process-wide place and handed out once.
//!
//! The `LISTEN_*` variables are read by the pure [`parse_listen_env`], which decides which
//! descriptors are ours and what each one serves; only turning them into listeners touches
//! the descriptors.
//!
//! Why not `sd-notify`'s own `listen_fds_with_names` (0.5), which the readiness messages
//! use the crate for: its parsing differs from what larch does, and tests check, in ways
//! that matter.
//! - It reads the process's environment itself, so the parse cannot be tested as a
//!   function of the values (tests would have to set variables every test thread shares).
//! - With `LISTEN_FDS=0` and `LISTEN_FDNAMES=` (empty), which systemd sets when it passes
//!   no sockets, it counts one name for no descriptor and fails ("invalid
//!   LISTEN_FDNAMES"); larch starts.
//! - Its errors are bare `io::Error`s ("invalid LISTEN_PID"); larch's [`ActivationError`]
//!   names the variable and its value, and says how many names and descriptors there are.
//! - It does not trim the numbers (` 4242 ` is refused), names unnamed descriptors
//!   `unknown` (larch keeps the name empty and says `unnamed`), and makes every descriptor
//!   close-on-exec before larch has looked at it, failing the whole activation with a bare
//!   `EBADF` for one that is not open, where larch names the descriptor and its name.
//! - Its `_and_unset_env` forms remove the variables always; larch leaves another
//!   process's inherited ones alone.
//!
//! So the crate does the notifications (`READY=1`, `STOPPING=1`, `STATUS=`) and larch
//! parses `LISTEN_*` itself, following sd_listen_fds(3).

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use sd_notify::NotifyState;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// Tells the service manager the daemon is serving (`READY=1`).
pub fn notify_ready() {
    notify(&[NotifyState::Ready]);
}

/// Tells the service manager the daemon is shutting down (`STOPPING=1`).
pub fn notify_stopping() {
    notify(&[NotifyState::Stopping]);
}

/// Sets the one-line status `systemctl status` shows (`STATUS=...`).
pub fn notify_status(status: &str) {
    // A newline would end the assignment and start another one.
    let line = status.replace('\n', " ");
    notify(&[NotifyState::Status(&line)]);
}

/// Sends `states`; a failure is reported and otherwise ignored, since serving goes on
/// whether or not the service manager heard (it times the start out if it did not).
fn notify(states: &[NotifyState]) {
    if let Err(err) = sd_notify::notify(states) {
        eprintln!("larch serve: telling systemd ({states:?}): {err}");
    }
}

/// What a socket systemd passed is for, from its name (`FileDescriptorName=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// NBD: named `nbd`, or unnamed (no name, an empty one, `unknown`, or the socket
    /// unit's name, which systemd gives when `FileDescriptorName=` is not set).
    Nbd,
    /// The HTTP endpoint: named `http`.
    Http,
}

/// One descriptor systemd passed, as [`parse_listen_env`] reads the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassedFd {
    /// The descriptor.
    pub fd: RawFd,
    /// Its name in `LISTEN_FDNAMES` (empty when there was none).
    pub name: String,
    /// What it serves.
    pub role: Role,
}

/// Why the sockets systemd passed cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// A `LISTEN_*` variable that is not what sd_listen_fds(3) says it is.
    #[error("{var}={value:?}: {why}")]
    BadVar {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `LISTEN_FDNAMES` names more or fewer descriptors than `LISTEN_FDS` counts.
    #[error("LISTEN_FDNAMES names {names} sockets, LISTEN_FDS counts {fds}")]
    NameCount {
        /// `LISTEN_FDS`.
        fds: usize,
        /// The names in `LISTEN_FDNAMES`.
        names: usize,
    },
    /// A name that is neither `nbd` nor `http`.
    #[error(
        "fd {fd} is named {name:?}: larch serves FileDescriptorName=nbd and FileDescriptorName=http"
    )]
    UnknownName {
        /// The descriptor.
        fd: RawFd,
        /// Its name.
        name: String,
    },
    /// More than one socket named `http` (the endpoint listens on one address).
    #[error("fds {first} and {second} are both named \"http\": the HTTP endpoint takes one")]
    TwoHttp {
        /// The first one.
        first: RawFd,
        /// The second one.
        second: RawFd,
    },
    /// A descriptor that cannot be a listener: closed, not a socket, not a listening
    /// stream socket, or of a family larch does not serve.
    #[error("fd {fd} ({name}): {why}")]
    NotAListener {
        /// The descriptor.
        fd: RawFd,
        /// Its name, or `unnamed`.
        name: String,
        /// What it is instead.
        why: String,
    },
}

/// Which descriptors systemd passed to this process (`our_pid`) and what each serves,
/// from the values of `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` (`None`: unset).
///
/// No `LISTEN_PID`, or one that is another process's (the variables were inherited from a
/// parent that was activated), means none were passed. Names are split on `:`; without
/// `LISTEN_FDNAMES` every descriptor is unnamed, and unnamed ones serve NBD.
pub fn parse_listen_env(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    listen_fdnames: Option<&str>,
    our_pid: u32,
) -> Result<Vec<PassedFd>, ActivationError> {
    let Some(pid) = listen_pid else {
        return Ok(Vec::new());
    };
    let bad = |var, value: &str, why| ActivationError::BadVar {
        var,
        value: value.to_string(),
        why,
    };
    let pid: u32 = pid
        .trim()
        .parse()
        .map_err(|_| bad("LISTEN_PID", pid, "not a process id"))?;
    if pid != our_pid {
        return Ok(Vec::new());
    }
    let Some(count) = listen_fds else {
        return Ok(Vec::new());
    };
    let n: usize = count
        .trim()
        .parse()
        .map_err(|_| bad("LISTEN_FDS", count, "not a count"))?;
    // Descriptors are ints: fd 3 + n - 1 must be one.
    if n > (RawFd::MAX - LISTEN_FDS_START) as usize {
        return Err(bad(
            "LISTEN_FDS",
            count,
            "more descriptors than there can be",
        ));
    }
    let names: Vec<&str> = match listen_fdnames {
        Some(names) if n > 0 => names.split(':').collect(),
        _ => vec![""; n],
    };
    if names.len() != n {
        return Err(ActivationError::NameCount {
            fds: n,
            names: names.len(),
        });
    }
    let mut passed = Vec::with_capacity(n);
    let mut http: Option<RawFd> = None;
    for (fd, name) in (LISTEN_FDS_START..).zip(names) {
        let role = role_of(fd, name)?;
        if role == Role::Http {
            if let Some(first) = http {
                return Err(ActivationError::TwoHttp { first, second: fd });
            }
            http = Some(fd);
        }
        passed.push(PassedFd {
            fd,
            name: name.to_string(),
            role,
        });
    }
    Ok(passed)
}

fn role_of(fd: RawFd, name: &str) -> Result<Role, ActivationError> {
    match name {
        "http" => Ok(Role::Http),
        "nbd" | "" | "unknown" => Ok(Role::Nbd),
        unit if unit.ends_with(".socket") => Ok(Role::Nbd),
        _ => Err(ActivationError::UnknownName {
            fd,
            name: name.to_string(),
        }),
    }
}

/// A listening socket systemd passed.
#[derive(Debug)]
pub enum ActivatedListener {
    /// TCP, IPv4 or IPv6.
    Tcp(std::net::TcpListener),
    /// A Unix stream socket.
    Unix(std::os::unix::net::UnixListener),
}

impl fmt::Display for ActivatedListener {
    /// `tcp:ADDR:PORT` or `unix:PATH`, as `larch serve` prints its listeners.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActivatedListener::Tcp(l) => match l.local_addr() {
                Ok(addr) => write!(f, "tcp:{addr}"),
                Err(_) => write!(f, "tcp:?"),
            },
            ActivatedListener::Unix(l) => {
                let addr = l.local_addr().ok();
                match addr.as_ref().and_then(|a| a.as_pathname()) {
                    Some(path) => write!(f, "unix:{}", path.display()),
                    None => write!(f, "unix:(unnamed)"),
                }
            }
        }
    }
}

/// The sockets systemd passed, by what they serve.
#[derive(Debug, Default)]
pub struct ActivatedSockets {
    /// The NBD listeners.
    pub nbd: Vec<ActivatedListener>,
    /// The HTTP endpoint's listener.
    pub http: Option<ActivatedListener>,
}

/// The sockets [`receive_sockets`] took, until the listeners take them.
static RECEIVED: Mutex<Option<ActivatedSockets>> = Mutex::new(None);

/// Takes the sockets systemd passed to this process, if any: checks that each is a
/// listening stream socket (TCP or Unix), makes it close-on-exec and non-blocking, keeps
/// them for [`take_nbd_listeners`] and [`take_http_listener`], and removes the `LISTEN_*`
/// variables so that no child takes them for its own. Returns how many there were.
///
/// # Safety
///
/// It changes the environment, so no other thread may read or write the environment while
/// it runs: call it before starting any. It takes ownership of the descriptors the
/// variables name, so nothing else in the process may use them.
pub unsafe fn receive_sockets() -> Result<usize, ActivationError> {
    let var = |name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    let (pid, fds, names) = (var("LISTEN_PID"), var("LISTEN_FDS"), var("LISTEN_FDNAMES"));
    let passed = parse_listen_env(
        pid.as_deref(),
        fds.as_deref(),
        names.as_deref(),
        std::process::id(),
    );
    // Variables that were meant for this process, or that are broken, go; another
    // process's stay (they were inherited, and are not ours to change).
    if !passed.as_ref().is_ok_and(|p| p.is_empty()) {
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            // SAFETY: the caller guarantees no other thread touches the environment.
            unsafe { std::env::remove_var(name) };
        }
    }
    let mut sockets = ActivatedSockets::default();
    let passed = passed?;
    for p in &passed {
        // SAFETY: the caller gives us the descriptors systemd passed.
        let listener = unsafe { listener_of(p) }?;
        match p.role {
            Role::Nbd => sockets.nbd.push(listener),
            Role::Http => sockets.http = Some(listener),
        }
    }
    *RECEIVED.lock().expect("activated sockets lock") = Some(sockets);
    Ok(passed.len())
}

/// The NBD listeners systemd passed (empty when none were, or they were taken already).
pub fn take_nbd_listeners() -> Vec<ActivatedListener> {
    let mut received = RECEIVED.lock().expect("activated sockets lock");
    received
        .as_mut()
        .map(|s| std::mem::take(&mut s.nbd))
        .unwrap_or_default()
}

/// The HTTP listener systemd passed, if it passed one that was not taken yet.
pub fn take_http_listener() -> Option<ActivatedListener> {
    let mut received = RECEIVED.lock().expect("activated sockets lock");
    received.as_mut().and_then(|s| s.http.take())
}

/// The listener on `passed.fd`, after checking that it is one.
///
/// # Safety
///
/// `passed.fd` must be a descriptor nothing else in the process owns or uses.
unsafe fn listener_of(passed: &PassedFd) -> Result<ActivatedListener, ActivationError> {
    let fd = passed.fd;
    let not = |why: String| ActivationError::NotAListener {
        fd,
        name: if passed.name.is_empty() {
            "unnamed".to_string()
        } else {
            passed.name.clone()
        },
        why,
    };
    // Only an open descriptor may become an OwnedFd.
    // SAFETY: F_GETFD reads the descriptor's flags and changes nothing.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(not(format!(
            "not open: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: the descriptor is open and, by the caller's promise, ours alone.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    set_cloexec(&owned).map_err(|e| not(format!("setting close-on-exec: {e}")))?;
    let domain = socket_option(owned.as_fd(), libc::SO_DOMAIN).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTSOCK) {
            not(format!("not a socket ({})", file_kind(&owned)))
        } else {
            not(format!("reading its socket family: {e}"))
        }
    })?;
    let kind = socket_option(owned.as_fd(), libc::SO_TYPE)
        .map_err(|e| not(format!("reading its socket type: {e}")))?;
    if kind != libc::SOCK_STREAM {
        return Err(not(
            "not a stream socket (larch serves ListenStream= sockets)".to_string(),
        ));
    }
    let listening = socket_option(owned.as_fd(), libc::SO_ACCEPTCONN)
        .map_err(|e| not(format!("reading whether it listens: {e}")))?;
    if listening == 0 {
        return Err(not(
            "a socket that is not listening (a connection? larch wants Accept=no)".to_string(),
        ));
    }
    let listener = match domain {
        libc::AF_INET | libc::AF_INET6 => {
            ActivatedListener::Tcp(std::net::TcpListener::from(owned))
        }
        libc::AF_UNIX => ActivatedListener::Unix(std::os::unix::net::UnixListener::from(owned)),
        other => return Err(not(format!("a socket of family {other}, not TCP or Unix"))),
    };
    let nonblocking = match &listener {
        ActivatedListener::Tcp(l) => l.set_nonblocking(true),
        ActivatedListener::Unix(l) => l.set_nonblocking(true),
    };
    nonblocking.map_err(|e| not(format!("making it non-blocking: {e}")))?;
    Ok(listener)
}

fn set_cloexec(fd: &OwnedFd) -> std::io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, reading and then setting its flags.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFD) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if flags & libc::FD_CLOEXEC == 0
        && unsafe { libc::fcntl(raw, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// An integer socket option of `fd` at `SOL_SOCKET`.
fn socket_option(fd: BorrowedFd<'_>, option: libc::c_int) -> std::io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are valid for writes of the sizes passed.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value)
}

/// What a descriptor that is not a socket is, for the error message.
fn file_kind(fd: &OwnedFd) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let Ok(file) = fd.try_clone().map(std::fs::File::from) else {
        return "unknown kind";
    };
    match file.metadata().map(|m| m.file_type()) {
        Ok(t) if t.is_file() => "a regular file",
        Ok(t) if t.is_dir() => "a directory",
        Ok(t) if t.is_fifo() => "a pipe",
        Ok(t) if t.is_char_device() => "a character device",
        Ok(t) if t.is_block_device() => "a block device",
        _ => "unknown kind",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PID: u32 = 4242;

    fn parse(
        pid: Option<&str>,
        fds: Option<&str>,
        names: Option<&str>,
    ) -> Result<Vec<PassedFd>, ActivationError> {
        parse_listen_env(pid, fds, names, PID)
    }

    fn roles(passed: &[PassedFd]) -> Vec<(RawFd, Role)> {
        passed.iter().map(|p| (p.fd, p.role)).collect()
    }

    #[test]
    fn no_listen_pid_or_another_process_s_means_no_sockets() {
        assert!(parse(None, Some("2"), Some("nbd:http")).unwrap().is_empty());
        assert!(
            parse(Some("1"), Some("2"), Some("nbd:http"))
                .unwrap()
                .is_empty()
        );
        assert!(parse(Some("4242"), None, None).unwrap().is_empty());
        assert!(parse(Some("4242"), Some("0"), None).unwrap().is_empty());
        // systemd sets LISTEN_FDNAMES to an empty string with no sockets.
        assert!(parse(Some("4242"), Some("0"), Some("")).unwrap().is_empty());
    }

    #[test]
    fn names_give_roles_from_fd_3_on() {
        let passed = parse(Some("4242"), Some("3"), Some("nbd:http:nbd")).unwrap();
        assert_eq!(
            roles(&passed),
            [(3, Role::Nbd), (4, Role::Http), (5, Role::Nbd)]
        );
        assert_eq!(passed[1].name, "http");
    }

    #[test]
    fn unnamed_sockets_serve_nbd() {
        let passed = parse(Some(" 4242 "), Some("2"), None).unwrap();
        assert_eq!(roles(&passed), [(3, Role::Nbd), (4, Role::Nbd)]);
        assert_eq!(passed[0].name, "");
        // An empty name, sd_listen_fds_with_names' "unknown", and the unit's name, which
        // systemd gives when FileDescriptorName= is not set.
        let passed = parse(Some("4242"), Some("3"), Some(":unknown:larch@tank.socket")).unwrap();
        assert_eq!(
            roles(&passed),
            [(3, Role::Nbd), (4, Role::Nbd), (5, Role::Nbd)]
        );
    }

    #[test]
    fn bad_values_are_errors_that_name_the_variable() {
        let err = |pid, fds, names| parse(pid, fds, names).unwrap_err().to_string();
        let e = err(Some("self"), Some("1"), None);
        assert!(e.contains("LISTEN_PID=\"self\""), "{e}");
        let e = err(Some("4242"), Some("-1"), None);
        assert!(e.contains("LISTEN_FDS=\"-1\""), "{e}");
        let e = err(Some("4242"), Some("99999999999"), None);
        assert!(e.contains("LISTEN_FDS"), "{e}");
        let e = err(Some("4242"), Some("2"), Some("nbd"));
        assert!(e.contains("names 1 sockets, LISTEN_FDS counts 2"), "{e}");
        let e = err(Some("4242"), Some("1"), Some("nbd:http"));
        assert!(e.contains("names 2 sockets, LISTEN_FDS counts 1"), "{e}");
        let e = err(Some("4242"), Some("2"), Some("nbd:htttp"));
        assert!(e.contains("fd 4 is named \"htttp\""), "{e}");
        let e = err(Some("4242"), Some("2"), Some("http:http"));
        assert!(e.contains("fds 3 and 4 are both named \"http\""), "{e}");
    }

    /// A descriptor dup'ed to a number no other test uses, so that `listener_of` may own it.
    fn dup_high(fd: BorrowedFd<'_>, to: RawFd) -> RawFd {
        // SAFETY: F_DUPFD makes a new descriptor at `to` or above; nothing else is changed.
        let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, to) };
        assert!(new >= to, "F_DUPFD: {}", std::io::Error::last_os_error());
        new
    }

    fn passed(fd: RawFd, name: &str) -> PassedFd {
        PassedFd {
            fd,
            name: name.to_string(),
            role: Role::Nbd,
        }
    }

    #[test]
    fn a_listening_tcp_socket_becomes_a_nonblocking_close_on_exec_listener() {
        let bound = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = bound.local_addr().unwrap();
        let fd = dup_high(std::os::fd::AsFd::as_fd(&bound), 500);
        // SAFETY: fd is a fresh duplicate nothing else uses.
        let listener = unsafe { listener_of(&passed(fd, "nbd")) }.unwrap();
        assert_eq!(listener.to_string(), format!("tcp:{addr}"));
        // SAFETY: reading the flags of a descriptor the listener owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0, "not close-on-exec");
        let ActivatedListener::Tcp(tcp) = listener else {
            panic!("not TCP: {listener:?}")
        };
        let err = tcp.accept().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
    }

    #[test]
    fn a_unix_listener_is_accepted_and_other_descriptors_are_refused_clearly() {
        let dir = std::env::temp_dir().join(format!("larch-systemd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nbd.sock");
        let _ = std::fs::remove_file(&path);
        let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let fd = dup_high(std::os::fd::AsFd::as_fd(&unix), 510);
        // SAFETY: fd is a fresh duplicate nothing else uses.
        let listener = unsafe { listener_of(&passed(fd, "")) }.unwrap();
        assert_eq!(listener.to_string(), format!("unix:{}", path.display()));

        let file = std::fs::File::create(dir.join("plain")).unwrap();
        let fd = dup_high(std::os::fd::AsFd::as_fd(&file), 520);
        // SAFETY: as above; on failure listener_of closes it.
        let err = unsafe { listener_of(&passed(fd, "nbd")) }.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("fd {fd} (nbd): not a socket (a regular file)")
        );

        let unbound = std::net::TcpStream::connect(tcp_peer()).unwrap();
        let fd = dup_high(std::os::fd::AsFd::as_fd(&unbound), 530);
        // SAFETY: as above.
        let err = unsafe { listener_of(&passed(fd, "")) }.unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "fd {fd} (unnamed): a socket that is not listening"
            )),
            "{err}"
        );

        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = dup_high(std::os::fd::AsFd::as_fd(&udp), 540);
        // SAFETY: as above.
        let err = unsafe { listener_of(&passed(fd, "nbd")) }.unwrap_err();
        assert!(err.to_string().contains("not a stream socket"), "{err}");

        // A descriptor that is not open: well above any the test process has.
        // SAFETY: listener_of checks that it is open before owning it.
        let err = unsafe { listener_of(&passed(100_000, "nbd")) }.unwrap_err();
        assert!(
            err.to_string().starts_with("fd 100000 (nbd): not open"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The address of a TCP listener that stays open for the test process's life, for a
    /// connected socket to test with.
    fn tcp_peer() -> std::net::SocketAddr {
        static PEER: std::sync::OnceLock<std::net::TcpListener> = std::sync::OnceLock::new();
        PEER.get_or_init(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .local_addr()
            .unwrap()
    }
}
