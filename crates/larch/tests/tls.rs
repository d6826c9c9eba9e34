//! NBD over TLS and access control, end to end with real clients (nbdinfo, nbdcopy,
//! qemu-img, fio) and certificates the test makes with openssl (tests/tls/make-certs.sh):
//! round trips under `--tls require`, the refusals (wrong CA, expired certificate, no
//! certificate when one is required, a certificate of another CA, plaintext under
//! `require`), plaintext and TLS side by side under `--tls on`, the access file's
//! allow-list and read-only clients, malformed TLS from a raw socket, bad credentials at
//! start, and the remote HTTPS endpoint's token.

mod common;
use common::{pattern, require, scratch};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn larch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_larch"))
}

/// The credentials of tests/tls/make-certs.sh, made once per test binary run.
fn certs() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        require("openssl");
        let dir = scratch("tls-certs");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls/make-certs.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "make-certs.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .clone()
}

/// `--tls MODE --tls-certificates DIR` for the credentials directory `dir` of
/// make-certs.sh, then `more`.
fn tls(mode: &str, dir: &str, more: &[&str]) -> Vec<String> {
    let dir = certs().join(dir);
    let mut args = vec![
        "--tls".to_string(),
        mode.to_string(),
        "--tls-certificates".to_string(),
        dir.to_str().unwrap().to_string(),
    ];
    args.extend(more.iter().map(|a| a.to_string()));
    args
}

/// A `larch serve` of a small demo pool on a free loopback port; its standard error is
/// collected, and its addresses are read from it.
struct Daemon {
    child: Option<Child>,
    state: PathBuf,
    port: u16,
    remote_http: Option<String>,
    log: mpsc::Receiver<String>,
}

impl Daemon {
    fn start<S: AsRef<str>>(extra: &[S]) -> Daemon {
        let extra: Vec<&str> = extra.iter().map(AsRef::as_ref).collect();
        let state = scratch("tls-pool");
        let mut child = larch()
            .args(["serve", "--state-dir"])
            .arg(&state)
            .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(["--demo-volume-size", "16M", "--demo-cache-size", "16M"])
            .args(["--demo-arc-max", "4M"])
            .args(&extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start larch serve");
        let (tx, log) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut daemon = Daemon {
            child: Some(child),
            state,
            port: 0,
            remote_http: None,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while daemon.port == 0 || (extra.contains(&"--http-remote") && daemon.remote_http.is_none())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = daemon
                .log
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("larch serve did not start: {:?}", daemon.finish()));
            if let Some(rest) = line.strip_prefix("larch serve: NBD on tcp:") {
                let addr = rest.split(',').next().unwrap();
                daemon.port = addr.rsplit(':').next().unwrap().parse().unwrap();
            }
            if let Some(rest) = line.strip_prefix("larch serve: Analytics for other machines on ") {
                daemon.remote_http = Some(rest.split(' ').next().unwrap().to_string());
            }
        }
        daemon
    }

    /// An `nbds://` URI of vol0 for the client credentials in `who` (a directory of
    /// make-certs.sh).
    fn tls_uri(&self, who: &str) -> String {
        format!(
            "nbds://localhost:{}/vol0?tls-certificates={}",
            self.port,
            certs().join(who).display()
        )
    }

    fn plain_uri(&self) -> String {
        format!("nbd://localhost:{}/vol0", self.port)
    }

    /// The daemon's token (daemon.json).
    fn token(&self) -> String {
        let text = std::fs::read_to_string(self.state.join("daemon.json")).unwrap();
        let record: serde_json::Value = serde_json::from_str(&text).unwrap();
        record["token"].as_str().unwrap().to_string()
    }

    /// Kills the daemon (if still running) and returns what it printed.
    fn finish(&mut self) -> String {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut lines = Vec::new();
        while let Ok(line) = self.log.recv_timeout(Duration::from_millis(200)) {
            lines.push(line);
        }
        lines.join("\n")
    }

    /// Whether the process is still running.
    fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.finish();
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run client")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(out: &Output, what: &str) {
    assert!(
        !out.status.success(),
        "{what} should have been refused: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn nbdinfo(uri: &str) -> Output {
    run(Command::new("nbdinfo").arg(uri))
}

/// Writes a pattern through `uri` with nbdcopy and reads it back: the round trip.
fn round_trip(uri: &str, dir: &Path, seed: u64) {
    let data = pattern(4 << 20, seed);
    let src = dir.join(format!("in-{seed}.raw"));
    let back = dir.join(format!("out-{seed}.raw"));
    std::fs::write(&src, &data).unwrap();
    // Only the first 4 MiB of the volume are compared.
    ok(
        &run(Command::new("nbdcopy").arg(&src).arg(uri)),
        "nbdcopy to the volume",
    );
    ok(
        &run(Command::new("nbdcopy").arg(uri).arg(&back)),
        "nbdcopy from the volume",
    );
    let read = std::fs::read(&back).unwrap();
    assert!(read.len() >= data.len());
    assert!(
        read[..data.len()] == data[..],
        "data differs after the round trip"
    );
}

#[test]
fn tls_require_round_trips_and_refuses_what_it_must() {
    for tool in ["nbdinfo", "nbdcopy", "qemu-img"] {
        require(tool);
    }
    let certs = certs();
    let mut daemon = Daemon::start(&tls("require", "server", &["--tls-verify-peer"]));
    let work = scratch("tls-work");
    let info = ok(&nbdinfo(&daemon.tls_uri("alice")), "nbdinfo over TLS");
    assert!(info.contains("with TLS"), "{info}");
    round_trip(&daemon.tls_uri("alice"), &work, 1);

    // qemu-img with a tls-creds-x509 object reads the same bytes.
    let qemu_out = work.join("qemu.raw");
    let out = run(Command::new("qemu-img")
        .arg("convert")
        .arg("--object")
        .arg(format!(
            "tls-creds-x509,id=tls0,dir={},endpoint=client",
            certs.join("alice").display()
        ))
        .arg("--image-opts")
        .arg(format!(
            "driver=nbd,host=localhost,port={},export=vol0,tls-creds=tls0",
            daemon.port
        ))
        .args(["-O", "raw"])
        .arg(&qemu_out));
    ok(&out, "qemu-img convert over TLS");
    let read = std::fs::read(&qemu_out).unwrap();
    assert!(
        read[..4 << 20] == pattern(4 << 20, 1)[..],
        "qemu-img read other bytes"
    );

    // Refused: a plaintext client, a client that cannot verify the server, an expired
    // certificate, no certificate, a certificate of another CA.
    refused(
        &nbdinfo(&daemon.plain_uri()),
        "plaintext under --tls require",
    );
    for who in ["wrongca", "expired", "nocert", "rogue"] {
        refused(&nbdinfo(&daemon.tls_uri(who)), who);
    }
    // The daemon still serves, and said why it closed them.
    ok(
        &nbdinfo(&daemon.tls_uri("bob")),
        "nbdinfo after the refusals",
    );
    assert!(daemon.alive());
    let log = daemon.finish();
    assert!(log.contains("certificate expired"), "{log}");
}

#[test]
fn fio_verifies_over_tls() {
    require("fio");
    let certs = certs();
    let daemon = Daemon::start(&tls("require", "server", &[]));
    // fio's URI may not name local files: libnbd then takes the client's credentials
    // from $HOME/.pki/libnbd.
    let home = scratch("tls-fio-home");
    let pki = home.join(".pki/libnbd");
    std::fs::create_dir_all(&pki).unwrap();
    for file in ["ca-cert.pem", "client-cert.pem", "client-key.pem"] {
        std::fs::copy(certs.join("alice").join(file), pki.join(file)).unwrap();
    }
    let out = run(Command::new("fio")
        .env("HOME", &home)
        .args(["--name=tls", "--ioengine=nbd", "--rw=randwrite", "--bs=4k"])
        .args([
            "--size=8M",
            "--iodepth=8",
            "--verify=crc32c",
            "--do_verify=1",
        ])
        .args(["--verify_fatal=1", "--output-format=terse"])
        .arg(format!("--uri=nbds://localhost:{}/vol0", daemon.port)));
    ok(&out, "fio verify over TLS");
}

#[test]
fn tls_on_serves_plaintext_and_tls_side_by_side() {
    require("nbdinfo");
    let daemon = Daemon::start(&tls("on", "server", &[]));
    let plain = ok(&nbdinfo(&daemon.plain_uri()), "plaintext under --tls on");
    assert!(plain.contains("without TLS"), "{plain}");
    let tls = ok(
        &nbdinfo(&daemon.tls_uri("nocert")),
        "TLS without a client certificate",
    );
    assert!(tls.contains("with TLS"), "{tls}");
}

#[test]
fn the_access_file_admits_by_name_and_address_and_makes_readers_read_only() {
    for tool in ["nbdinfo", "nbdcopy"] {
        require(tool);
    }
    let work = scratch("tls-access");
    let access = work.join("access.toml");
    std::fs::write(
        &access,
        "# alice reads and writes; bob reads, from this machine only\n\
         [[allow]]\nexports = [\"vol0\"]\nnames = [\"alice\"]\n\n\
         [[allow]]\nexports = [\"*\"]\nnames = [\"bob\"]\naddresses = [\"127.0.0.0/8\"]\nread_only = true\n\n\
         [[allow]]\nexports = [\"vol0\"]\naddresses = [\"192.0.2.0/24\"]\n",
    )
    .unwrap();
    let daemon = Daemon::start(&tls(
        "on",
        "server",
        &["--access", access.to_str().unwrap()],
    ));
    round_trip(&daemon.tls_uri("alice"), &work, 2);
    let bob = ok(&nbdinfo(&daemon.tls_uri("bob")), "bob's nbdinfo");
    assert!(bob.contains("is_read_only: true"), "{bob}");
    // bob reads what alice wrote, and cannot write.
    let back = work.join("bob.raw");
    ok(
        &run(Command::new("nbdcopy")
            .arg(daemon.tls_uri("bob"))
            .arg(&back)),
        "bob reads",
    );
    assert!(std::fs::read(&back).unwrap()[..4 << 20] == pattern(4 << 20, 2)[..]);
    // The server itself refuses bob's writes (EPERM), not only his client: libnbd's own
    // checks are turned off for this.
    let script = format!(
        "import nbd\n\
         h = nbd.NBD()\n\
         h.set_strict_mode(0)\n\
         h.set_uri_allow_local_file(True)\n\
         h.connect_uri({uri:?})\n\
         assert h.is_read_only()\n\
         try:\n    h.pwrite(b'x' * 4096, 0)\nexcept nbd.Error as e:\n    print('refused', e.errnum)\n\
         else:\n    print('written')\n",
        uri = daemon.tls_uri("bob")
    );
    let out = ok(
        &run(Command::new("/usr/bin/python3").args(["-c", &script])),
        "bob's write through libnbd",
    );
    // EPERM is 1.
    assert_eq!(out.trim(), "refused 1", "{out}");
    // Not admitted: plaintext (no name), TLS without a certificate, another CA's alice.
    refused(&nbdinfo(&daemon.plain_uri()), "a plaintext client");
    refused(&nbdinfo(&daemon.tls_uri("nocert")), "no certificate");
    refused(&nbdinfo(&daemon.tls_uri("rogue")), "another CA's alice");
    // The list shows only what a client may use.
    let list = ok(
        &run(Command::new("nbdinfo")
            .arg("--list")
            .arg(daemon.plain_uri())),
        "nbdinfo --list in plaintext",
    );
    assert!(!list.contains("export=\"vol0\""), "{list}");
    let list = ok(
        &run(Command::new("nbdinfo")
            .arg("--list")
            .arg(daemon.tls_uri("alice"))),
        "nbdinfo --list as alice",
    );
    assert!(list.contains("export=\"vol0\""), "{list}");
}

/// The NBD greeting, our client flags and one option, over a raw socket.
fn raw_handshake(port: u16, option: u32, data: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut msg = b"IHAVEOPT".to_vec();
    msg.extend_from_slice(&option.to_be_bytes());
    msg.extend_from_slice(&(data.len() as u32).to_be_bytes());
    msg.extend_from_slice(data);
    s.write_all(&msg).unwrap();
    s
}

/// Reads until the server closes; true when it closed (rather than timing out).
fn closes(mut s: TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn malformed_tls_and_option_sequences_close_only_their_connection() {
    require("nbdinfo");
    let mut daemon = Daemon::start(&tls("require", "server", &[]));
    const STARTTLS: u32 = 5;
    const EXPORT_NAME: u32 = 1;
    // A client that holds a connection open in TLS the whole time.
    let held = raw_handshake(daemon.port, STARTTLS, &[]);
    let mut cases: Vec<TcpStream> = Vec::new();
    // Garbage where the TLS ClientHello belongs, after reading the ACK.
    let mut garbage = raw_handshake(daemon.port, STARTTLS, &[]);
    let mut ack = [0u8; 20];
    garbage.read_exact(&mut ack).unwrap();
    assert_eq!(
        u32::from_be_bytes(ack[12..16].try_into().unwrap()),
        1,
        "ACK"
    );
    garbage.write_all(&pattern(3000, 7)).unwrap();
    cases.push(garbage);
    // A TLS record header announcing an absurd length, then nothing.
    let mut huge = raw_handshake(daemon.port, STARTTLS, &[]);
    huge.read_exact(&mut ack).unwrap();
    huge.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0x01])
        .unwrap();
    cases.push(huge);
    // Bytes sent before the ACK arrives (plaintext where only TLS may follow).
    let mut s = TcpStream::connect(("127.0.0.1", daemon.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut msg = 3u32.to_be_bytes().to_vec();
    msg.extend_from_slice(b"IHAVEOPT");
    msg.extend_from_slice(&STARTTLS.to_be_bytes());
    msg.extend_from_slice(&0u32.to_be_bytes());
    msg.extend_from_slice(b"not a TLS hello");
    s.write_all(&msg).unwrap();
    cases.push(s);
    // EXPORT_NAME in plaintext under --tls require cannot be answered: closed.
    cases.push(raw_handshake(daemon.port, EXPORT_NAME, b"vol0"));
    // STARTTLS with a payload is answered ERR_INVALID and the connection stays.
    let mut invalid = raw_handshake(daemon.port, STARTTLS, b"x");
    let mut reply = [0u8; 20];
    invalid.read_exact(&mut reply).unwrap();
    assert_eq!(
        u32::from_be_bytes(reply[12..16].try_into().unwrap()),
        (1 << 31) + 3,
        "ERR_INVALID"
    );
    for (i, case) in cases.into_iter().enumerate() {
        assert!(closes(case), "case {i} was not closed");
    }
    ok(
        &nbdinfo(&daemon.tls_uri("alice")),
        "a good client meanwhile",
    );
    drop(held);
    assert!(daemon.alive(), "{}", daemon.finish());
}

/// Runs `larch serve` with `args`, which must fail at start; returns its standard error.
fn fails_at_start<S: AsRef<str>>(args: &[S]) -> String {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let state = scratch("tls-bad");
    let out = larch()
        .args(["serve", "--state-dir"])
        .arg(&state)
        .args(["--http", "off"])
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "larch serve {args:?} started: {stderr}"
    );
    assert!(!stderr.contains("NBD on tcp"), "{stderr}");
    stderr
}

#[test]
fn bad_credentials_and_settings_are_clear_errors_at_start() {
    let certs = certs();
    let err = fails_at_start(&tls("require", "nowhere", &[]));
    assert!(err.contains("nowhere/server-cert.pem"), "{err}");
    let err = fails_at_start(&tls("require", "encrypted", &[]));
    assert!(
        err.contains("encrypted/server-key.pem: the key is encrypted"),
        "{err}"
    );
    let err = fails_at_start(&tls("require", "mismatch", &[]));
    assert!(err.contains("is not the key of the certificate"), "{err}");
    let not_pem = certs.join("alice/ca-cert.pem");
    let err = fails_at_start(&[
        "--tls",
        "on",
        "--tls-cert",
        not_pem.to_str().unwrap(),
        "--tls-key",
        not_pem.to_str().unwrap(),
    ]);
    assert!(err.contains("no private key"), "{err}");
    let err = fails_at_start(&["--listen", "0.0.0.0:0"]);
    assert!(err.contains("--allow-remote-plaintext"), "{err}");
    let err = fails_at_start(&["--tls", "on", "--tls-psk", "/etc/keys.psk"]);
    assert!(err.contains("pre-shared keys are not supported"), "{err}");
    let work = scratch("tls-bad-access");
    let access = work.join("access.toml");
    std::fs::write(
        &access,
        "[[allow]]\nexports = [\"vol0\"]\naddresses = [\"10.0.0.300\"]\n",
    )
    .unwrap();
    let err = fails_at_start(&["--access", access.to_str().unwrap()]);
    assert!(err.contains("access.toml: rule 1: addresses"), "{err}");
    std::fs::write(&access, "[[allow]]\nexports = [\"nope\"]\n").unwrap();
    let err = fails_at_start(&["--access", access.to_str().unwrap()]);
    assert!(err.contains("\"nope\""), "{err}");
    std::fs::write(&access, "[[allow]\n").unwrap();
    let err = fails_at_start(&["--access", access.to_str().unwrap()]);
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn the_remote_endpoint_is_https_reads_only_and_needs_its_token() {
    require("curl");
    let certs = certs();
    let daemon = Daemon::start(&tls("require", "server", &["--http-remote", "127.0.0.1:0"]));
    let base = daemon.remote_http.clone().unwrap();
    assert!(base.starts_with("https://"), "{base}");
    // `larch analytics url --remote` gives the address with the view token.
    let out = ok(
        &run(larch()
            .args(["analytics", "url", "--remote", "--state-dir"])
            .arg(&daemon.state)),
        "larch analytics url --remote",
    );
    let link = out.trim().to_string();
    let view = link
        .split_once("?token=")
        .map(|(_, t)| t.to_string())
        .unwrap_or_else(|| panic!("no token in {link}"));
    assert!(link.starts_with(&base), "{link} vs {base}");
    assert_ne!(
        view,
        daemon.token(),
        "the view token is not the management token"
    );
    let base = base.replace("127.0.0.1", "localhost");
    let ca = certs.join("ca-cert.pem");
    // (status, headers) of one request.
    let curl = |args: &[&str]| {
        let out = run(Command::new("curl")
            .args([
                "-s",
                "-D",
                "-",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
            ])
            .arg(&ca)
            .args(args));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let code = text.lines().last().unwrap_or("").to_string();
        (code, text.to_lowercase())
    };
    let metrics = format!("{base}metrics");
    assert_eq!(curl(&[&metrics]).0, "401");
    let bearer = format!("Authorization: Bearer {view}");
    assert_eq!(curl(&["-H", &bearer, &metrics]).0, "200");
    assert_eq!(
        curl(&["-H", "Authorization: Bearer wrong", &metrics]).0,
        "401"
    );
    // The management token is not the view token.
    let management = format!("Authorization: Bearer {}", daemon.token());
    assert_eq!(curl(&["-H", &management, &metrics]).0, "401");
    // The first visit's ?token= sets the cookie and sends the browser to the address
    // without the token; a stale cookie does not stand in its way.
    let (code, headers) = curl(&[
        "-H",
        "Cookie: larch_view=stale",
        &format!("{base}api/v1/catalog?token={view}"),
    ]);
    assert_eq!(code, "303", "{headers}");
    assert!(
        headers.contains(&format!("set-cookie: larch_view={view}")),
        "{headers}"
    );
    assert!(headers.contains("; secure"), "{headers}");
    assert!(
        headers.contains("location: /api/v1/catalog\r\n"),
        "{headers}"
    );
    let cookie = format!("Cookie: larch_view={view}");
    assert_eq!(
        curl(&["-H", &cookie, &format!("{base}api/v1/catalog")]).0,
        "200"
    );
    // Changes are not served here, whatever the token or header.
    let set = format!("{base}admin/set");
    for token_header in [
        bearer.clone(),
        format!("X-Larch-Token: {}", daemon.token()),
        management.clone(),
    ] {
        let (code, _) = curl(&[
            "-H",
            &token_header,
            "-H",
            &format!("X-Larch-Token: {}", daemon.token()),
            "-X",
            "POST",
            "--data",
            "zfs_arc_max=8M",
            &set,
        ]);
        assert_eq!(code, "403", "{token_header}");
    }
    // Plaintext HTTP on the HTTPS port gets nothing.
    let plain = base.replace("https://", "http://");
    assert_ne!(curl(&[&format!("{plain}metrics")]).0, "200");
}

#[test]
fn one_client_address_cannot_take_every_connection() {
    let daemon = Daemon::start(&["--max-connections-per-client", "2"]);
    let greeted = |s: &mut TcpStream| {
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).is_ok() && &greeting[..8] == b"NBDMAGIC"
    };
    let mut first = TcpStream::connect(("127.0.0.1", daemon.port)).unwrap();
    let mut second = TcpStream::connect(("127.0.0.1", daemon.port)).unwrap();
    for s in [&mut first, &mut second] {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        assert!(greeted(s));
    }
    let third = TcpStream::connect(("127.0.0.1", daemon.port)).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert!(
        closes(third),
        "a third connection from one address was served"
    );
    // Once one closes, the address may connect again.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut again = TcpStream::connect(("127.0.0.1", daemon.port)).unwrap();
        again
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        if greeted(&mut again) {
            break;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_file_takes_the_same_tls_options() {
    require("nbdinfo");
    let work = scratch("tls-serve-file");
    let image = work.join("disk.img");
    std::fs::write(&image, pattern(1 << 20, 3)).unwrap();
    let mut child = larch()
        .arg("serve-file")
        .arg(&image)
        .args(["--listen", "127.0.0.1:0", "--export-name", "disk"])
        .args(["--handshake-timeout", "1"])
        .args(tls("require", "server", &["--tls-verify-peer"]))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines
            .next()
            .expect("serve-file ended before listening")
            .unwrap();
        if let Some((_, addr)) = line.split_once(" on tcp:") {
            break addr.rsplit(':').next().unwrap().parse().unwrap();
        }
    };
    let uri = |query: &str| format!("nbds://localhost:{port}/disk{query}");
    let alice = format!("?tls-certificates={}", certs().join("alice").display());
    let nocert = format!("?tls-certificates={}", certs().join("nocert").display());
    let info = ok(&nbdinfo(&uri(&alice)), "nbdinfo over TLS to serve-file");
    assert!(
        info.contains("with TLS") && info.contains("1048576"),
        "{info}"
    );
    refused(
        &nbdinfo(&uri(&nocert)),
        "no certificate under --tls-verify-peer",
    );
    refused(
        &nbdinfo(&format!("nbd://localhost:{port}/disk")),
        "plaintext under --tls require",
    );
    // A client that stops in the middle of the TLS handshake is closed at the handshake
    // timeout (1 s here), well before this read gives up.
    const STARTTLS: u32 = 5;
    let mut stalled = raw_handshake(port, STARTTLS, &[]);
    let mut ack = [0u8; 20];
    stalled.read_exact(&mut ack).unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert!(closes(stalled), "a stalled TLS handshake was not closed");
    let _ = child.kill();
    let _ = child.wait();
}
