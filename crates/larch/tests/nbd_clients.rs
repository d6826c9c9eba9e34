//! `larch serve-file` against real NBD clients: nbdinfo, nbdcopy, libnbd (Python, via
//! `tests/nbd/edge_cases.py`), qemu-img/qemu-io, fio, nbdfuse + ext4, and raw sockets
//! sending malformed streams.
//!
//! Every server listens on a Unix socket in a private temporary directory (one test uses
//! TCP on 127.0.0.1 with a kernel-chosen port). A missing client tool fails the test with
//! the package to install (`scripts/test` installs them); only the FUSE/loop-device test
//! skips, with a printed reason, where the sandbox lacks those devices.

mod common;
use common::pattern;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const PYTHON: &str = "/usr/bin/python3";

fn larch_bin() -> PathBuf {
    std::env::var_os("LARCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_larch")))
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/nbd")
        .join(name)
}

/// Fails the test unless `tool` is installed, naming the package that provides it.
fn require(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
        || Path::new(tool).is_file();
    assert!(
        found,
        "client tool {tool} is missing: run scripts/test, or apt-get install -y {package}"
    );
}

fn require_python_nbd() {
    require(PYTHON, "python3");
    let ok = Command::new(PYTHON)
        .args(["-c", "import nbd"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{PYTHON} cannot import nbd: run scripts/test, or apt-get install -y python3-libnbd"
    );
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("larch-nbd-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `larch serve-file`, stopped (SIGTERM, then SIGKILL) when dropped.
struct Server {
    child: Option<Child>,
    socket: PathBuf,
}

impl Server {
    /// Serves `image` on `dir/nbd.sock` with extra arguments.
    fn start(dir: &TempDir, image: &Path, extra: &[&str]) -> Server {
        let socket = dir.path("nbd.sock");
        let child = Command::new(larch_bin())
            .arg("serve-file")
            .arg(image)
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn larch serve-file");
        let mut server = Server {
            child: Some(child),
            socket,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("larch serve-file exited early: {status}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "server socket never appeared"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Sends SIGTERM and waits for the exit status.
    fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server already stopped");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait for server") {
                return status;
            }
            if start.elapsed() > CLIENT_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server ignored SIGTERM for {CLIENT_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An image of `size` bytes (sparse), optionally with content at the start.
fn image(dir: &TempDir, name: &str, size: u64, content: &[u8]) -> PathBuf {
    let path = dir.path(name);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(content).unwrap();
    f.set_len(size).unwrap();
    path
}

/// Longest any client command may run before the test kills it and fails.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs a client to completion (killing it after [`CLIENT_TIMEOUT`]) and asserts success.
fn run(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > CLIENT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {CLIENT_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn edge_cases(uri: &str, cases: &[&str]) {
    require_python_nbd();
    let out = run(Command::new(PYTHON)
        .arg(script("edge_cases.py"))
        .arg(uri)
        .args(cases));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for case in cases {
        assert!(
            stdout.contains(&format!("ok {case}")),
            "{case} did not finish: {stdout}"
        );
    }
}

#[test]
fn nbdinfo_reports_the_export() {
    require("nbdinfo", "libnbd-bin");
    let dir = TempDir::new("info");
    let img = image(&dir, "disk.img", 64 * MIB, &pattern(MIB as usize, 1));
    let server = Server::start(
        &dir,
        &img,
        &["--export-name", "vol1", "--description", "test volume"],
    );
    let uri = format!("nbd+unix:///vol1?socket={}", server.socket.display());
    let out = run(Command::new("nbdinfo").arg("--json").arg(&uri));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("nbdinfo --json");
    assert_eq!(json["structured"], true);
    let export = &json["exports"][0];
    assert_eq!(export["export-name"], "vol1");
    assert_eq!(export["description"], "test volume");
    assert_eq!(export["export-size"], 64 * MIB);
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_fast_zero",
        "can_df",
        "can_multi_conn",
        "can_cache",
    ] {
        assert_eq!(export[flag], true, "{flag} in {export}");
    }
    assert_eq!(export["is_read_only"], false);
    assert_eq!(export["contexts"][0], "base:allocation");
    assert_eq!(export["block_size_minimum"], 1);
    assert_eq!(export["block_size_preferred"], 4096);
    assert_eq!(export["block_size_maximum"], 32 * MIB);

    let list = run(Command::new("nbdinfo").arg("--list").arg(server.uri()));
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("export=\"vol1\"") && text.contains("test volume"),
        "{text}"
    );

    // The first MiB holds data, the rest of the sparse file is a hole.
    let map = run(Command::new("nbdinfo").arg("--map").arg(&uri));
    let lines: Vec<Vec<String>> = String::from_utf8_lossy(&map.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(lines[0][0], "0");
    assert_eq!(lines[0][2], "0", "first extent is data: {lines:?}");
    let last = lines.last().unwrap();
    assert_eq!(last[2], "3", "last extent is a hole: {lines:?}");
    let end: u64 = last[0].parse::<u64>().unwrap() + last[1].parse::<u64>().unwrap();
    assert_eq!(end, 64 * MIB);

    // An unknown name is refused (NBD_REP_ERR_UNKNOWN), not served.
    let bad = format!("nbd+unix:///nope?socket={}", server.socket.display());
    let status = Command::new("nbdinfo").arg(&bad).output().unwrap();
    assert!(!status.status.success());
}

#[test]
fn nbdinfo_over_tcp() {
    require("nbdinfo", "libnbd-bin");
    let dir = TempDir::new("tcp");
    let img = image(&dir, "disk.img", 8 * MIB, b"");
    let mut child = Command::new(larch_bin())
        .arg("serve-file")
        .arg(&img)
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .rsplit_once("tcp:")
        .map(|(_, a)| a.to_string())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let out = Command::new("nbdinfo")
        .args(["--size", &format!("nbd://{addr}/")])
        .output()
        .unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (8 * MIB).to_string()
    );
    assert!(status.success(), "exit after SIGTERM: {status}");
}

#[test]
fn nbdcopy_both_ways() {
    require("nbdcopy", "libnbd-bin");
    let dir = TempDir::new("copy");
    let size = 48 * MIB;
    // Data, a hole, data: exercises sparse-aware copying.
    let mut src = pattern(size as usize, 7);
    src[(8 * MIB) as usize..(24 * MIB) as usize].fill(0);
    std::fs::write(dir.path("src.raw"), &src).unwrap();
    let img = image(&dir, "disk.img", size, b"");
    let server = Server::start(&dir, &img, &[]);
    run(Command::new("nbdcopy")
        .arg("--flush")
        .arg(dir.path("src.raw"))
        .arg(server.uri()));
    run(Command::new("nbdcopy")
        .arg(server.uri())
        .arg(dir.path("back.raw")));
    let back = std::fs::read(dir.path("back.raw")).unwrap();
    assert!(back == src, "nbdcopy round trip differs");
    assert!(
        std::fs::read(&img).unwrap() == src,
        "image differs from source"
    );
}

#[test]
fn libnbd_edge_cases() {
    let dir = TempDir::new("edge");
    let img = image(&dir, "disk.img", 64 * MIB, b"");
    let server = Server::start(&dir, &img, &["--description", "edge cases"]);
    edge_cases(
        &server.uri(),
        &[
            "info_equals_go",
            "basic_io",
            "simple_replies",
            "flags",
            "trim_zero_block_status",
            "many_in_flight",
            "multi_conn",
        ],
    );
}

#[test]
fn libnbd_read_only_and_misaligned() {
    let dir = TempDir::new("ro");
    let content = pattern(MIB as usize, 3);
    let img = image(&dir, "disk.img", 4 * MIB, &content);
    {
        let server = Server::start(&dir, &img, &["--read-only"]);
        edge_cases(&server.uri(), &["read_only"]);
    }
    assert!(
        std::fs::read(&img).unwrap()[..MIB as usize] == content[..],
        "read-only export changed"
    );
    let server = Server::start(&dir, &img, &["--min-block-size", "512"]);
    edge_cases(&server.uri(), &["misaligned"]);
}

#[test]
fn libnbd_stdio_mode() {
    let dir = TempDir::new("stdio");
    let img = image(&dir, "disk.img", MIB, b"");
    // Arguments joined with the unit separator, split again by the script.
    let cmd = [
        larch_bin().display().to_string(),
        "serve-file".into(),
        "--stdio".into(),
        img.display().to_string(),
    ]
    .join("\x1f");
    edge_cases(&cmd, &["stdio"]);
    assert!(
        std::fs::read(&img).unwrap()[..512]
            .iter()
            .all(|&b| b == b's')
    );
}

#[test]
fn qemu_img_and_qemu_io() {
    require("qemu-img", "qemu-utils");
    require("qemu-io", "qemu-utils");
    let dir = TempDir::new("qemu");
    let size = 32 * MIB;
    let src = pattern(size as usize, 11);
    std::fs::write(dir.path("src.raw"), &src).unwrap();
    let img = image(&dir, "disk.img", size, b"");
    let server = Server::start(&dir, &img, &[]);
    let uri = server.uri();
    let info = run(Command::new("qemu-img").args(["info", "--output=json", &uri]));
    let json: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(json["virtual-size"], size);
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw", "-t", "none"])
        .arg(dir.path("src.raw"))
        .arg(&uri));
    let cmp = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(dir.path("src.raw"))
        .arg(&uri));
    assert!(String::from_utf8_lossy(&cmp.stdout).contains("identical"));
    // Pattern writes (FUA: qemu-io's default cache mode), zeroes with and without
    // NO_HOLE, discard, flush, and pattern-verified reads.
    let io = run(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -P 0xaa 0 1M",
        "-c",
        "write -z 1M 1M",
        "-c",
        "write -z -u 2M 1M",
        "-c",
        "discard 3M 1M",
        "-c",
        "flush",
        "-c",
        "read -P 0xaa 0 1M",
        "-c",
        "read -P 0 1M 2M",
        "-c",
        "map",
        &uri,
    ]));
    let text = String::from_utf8_lossy(&io.stdout);
    assert!(!text.contains("Pattern verification failed"), "{text}");
    assert!(
        text.contains("read 1048576/1048576 bytes at offset 0"),
        "{text}"
    );
    let disk = std::fs::read(&img).unwrap();
    assert!(disk[..MIB as usize].iter().all(|&b| b == 0xaa));
    assert!(disk[MIB as usize..3 * MIB as usize].iter().all(|&b| b == 0));
    assert!(disk[4 * MIB as usize..] == src[4 * MIB as usize..]);
}

#[test]
fn fio_random_writes_verify_across_jobs() {
    require("fio", "fio");
    let dir = TempDir::new("fio");
    let img = image(&dir, "disk.img", 64 * MIB, b"");
    let server = Server::start(&dir, &img, &[]);
    let job = dir.path("verify.fio");
    // Each job owns a 16 MiB slice (offset_increment), so verification is per job.
    std::fs::write(
        &job,
        "[global]\nioengine=nbd\nuri=${URI}\nrw=randwrite\nbsrange=4k-64k\niodepth=16\n\
         size=16m\noffset_increment=16m\nnumjobs=4\nverify=crc32c\nverify_fatal=1\nverify_state_save=0\ndo_verify=1\n\
         [verify]\n",
    )
    .unwrap();
    let out = run(Command::new("fio")
        .arg("--output-format=json")
        .arg(&job)
        .env("URI", server.uri()));
    // fio's nbd engine prints "fio: connected to NBD server" before the JSON.
    let start = out
        .stdout
        .iter()
        .position(|&b| b == b'{')
        .expect("fio printed no JSON");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout[start..]).expect("fio json");
    let jobs = json["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 4);
    for j in jobs {
        assert_eq!(j["error"], 0, "{j}");
        assert!(j["write"]["io_bytes"].as_u64().unwrap() >= 16 * MIB);
        assert!(
            j["read"]["io_bytes"].as_u64().unwrap() >= 16 * MIB,
            "verify reads"
        );
    }
}

#[test]
fn sigterm_answers_eshutdown_and_exits_zero() {
    require_python_nbd();
    let dir = TempDir::new("shutdown");
    let img = image(&dir, "disk.img", 4 * MIB, b"");
    let mut server = Server::start(&dir, &img, &["--shutdown-grace", "30"]);
    let mut client = Command::new(PYTHON)
        .arg(script("edge_cases.py"))
        .arg(server.uri())
        .arg("shutdown_wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "connected");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(server.pid(), libc::SIGTERM) };
    // Give the signal time to arrive before the client's next request; the assertion
    // below accepts only ESHUTDOWN, so a race would show as a failure, not a pass.
    std::thread::sleep(Duration::from_millis(300));
    client.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(client.wait().unwrap().success(), "client failed: {rest}");
    assert!(rest.contains("error ESHUTDOWN"), "{rest}");
    // The client disconnects after its error; the server then exits 0 on its own.
    let status = server.terminate();
    assert!(status.success(), "server exit: {status}");
}

#[test]
fn nbdfuse_ext4_round_trip() {
    let reason = fuse_unavailable_reason();
    if let Some(reason) = reason {
        println!("SKIPPED nbdfuse_ext4_round_trip: {reason}");
        return;
    }
    require("nbdfuse", "libnbd-bin (nbdfuse) and fuse3");
    require("mkfs.ext4", "e2fsprogs");
    require("losetup", "mount");
    let dir = TempDir::new("fuse");
    let img = image(&dir, "disk.img", 128 * MIB, b"");
    let server = Server::start(&dir, &img, &[]);
    let fusedir = dir.path("fuse");
    let mnt = dir.path("mnt");
    std::fs::create_dir_all(&fusedir).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let mut fuse = Command::new("nbdfuse")
        .arg(fusedir.join("disk"))
        .arg(server.uri())
        .spawn()
        .unwrap();
    let disk = fusedir.join("disk");
    let start = Instant::now();
    while !disk.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nbdfuse never exposed the disk"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = std::panic::catch_unwind(|| {
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&disk));
        let out = run(Command::new("losetup").args(["-f", "--show"]).arg(&disk));
        let loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mounted = Command::new("mount")
            .arg(&loopdev)
            .arg(&mnt)
            .status()
            .unwrap();
        if mounted.success() {
            let data = pattern(5 * MIB as usize, 99);
            std::fs::write(mnt.join("f"), &data).unwrap();
            run(&mut Command::new("sync"));
            run(Command::new("umount").arg(&mnt));
            run(Command::new("mount").arg(&loopdev).arg(&mnt));
            let back = std::fs::read(mnt.join("f")).unwrap();
            run(Command::new("umount").arg(&mnt));
            let _ = Command::new("losetup").arg("-d").arg(&loopdev).status();
            assert!(back == data, "file differs after remount");
            println!("nbdfuse + {loopdev} + ext4: 5 MiB file survived a remount");
            let fsck = Command::new("fsck.ext4")
                .args(["-n", "-f"])
                .arg(&disk)
                .output()
                .unwrap();
            assert!(
                fsck.status.success(),
                "fsck: {}",
                String::from_utf8_lossy(&fsck.stdout)
            );
        } else {
            let _ = Command::new("losetup").arg("-d").arg(&loopdev).status();
            println!("SKIPPED mount part of nbdfuse_ext4_round_trip: mount failed ({mounted})");
        }
    });
    // Either may find it already unmounted; that is fine.
    for cleanup in [["fusermount3", "-u"], ["umount", "-q"]] {
        let _ = Command::new(cleanup[0])
            .arg(cleanup[1])
            .arg(&fusedir)
            .stderr(Stdio::null())
            .status();
    }
    let _ = fuse.kill();
    let _ = fuse.wait();
    drop(server);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn fuse_unavailable_reason() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("mounting needs root".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no loop devices (/dev/loop-control missing)".into());
    }
    None
}

// ---- raw sockets: malformed and hand-made streams -------------------------------------

const IHAVEOPT: u64 = 0x4948_4156_454f_5054;

fn raw_connect(server: &Server) -> UnixStream {
    let mut s = UnixStream::connect(&server.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
    s
}

fn send_option(s: &mut UnixStream, option: u32, data: &[u8]) {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    s.write_all(&v).unwrap();
}

/// Reads one option reply: (option, reply type, data).
fn read_option_reply(s: &mut UnixStream) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut data = vec![0u8; len];
    s.read_exact(&mut data).unwrap();
    (
        u32::from_be_bytes(h[8..12].try_into().unwrap()),
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
        data,
    )
}

/// Handshake with EXPORT_NAME and NO_ZEROES: simple replies only.
fn raw_transmission(server: &Server) -> UnixStream {
    let mut s = raw_connect(server);
    s.write_all(&3u32.to_be_bytes()).unwrap();
    send_option(&mut s, 1, b"");
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).unwrap();
    s
}

fn request(s: &mut UnixStream, flags: u16, command: u16, cookie: u64, offset: u64, length: u32) {
    let mut v = 0x2560_9513u32.to_be_bytes().to_vec();
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&command.to_be_bytes());
    v.extend_from_slice(&cookie.to_be_bytes());
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&length.to_be_bytes());
    s.write_all(&v).unwrap();
}

/// Reads a simple reply: (error, cookie).
fn simple_reply(s: &mut UnixStream) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(&h[0..4], &0x6744_6698u32.to_be_bytes());
    (
        u32::from_be_bytes(h[4..8].try_into().unwrap()),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
    )
}

/// True once the server closed the connection (EOF or reset).
fn closed_by_server(s: &mut UnixStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn raw_option_negotiation() {
    let dir = TempDir::new("rawopt");
    let img = image(&dir, "disk.img", MIB, b"");
    let server = Server::start(&dir, &img, &[]);
    let mut s = raw_connect(&server);
    s.write_all(&1u32.to_be_bytes()).unwrap();
    // Unknown option with a payload: ERR_UNSUP, payload skipped, negotiation goes on.
    send_option(&mut s, 0xdead, &[9u8; 100]);
    assert_eq!(read_option_reply(&mut s).1, (1 << 31) + 1);
    send_option(&mut s, 5, &[]);
    assert_eq!(
        read_option_reply(&mut s).1,
        (1 << 31) + 2,
        "STARTTLS: ERR_POLICY"
    );
    send_option(&mut s, 3, &[1]);
    assert_eq!(
        read_option_reply(&mut s).1,
        (1 << 31) + 3,
        "LIST with data: ERR_INVALID"
    );
    send_option(&mut s, 10, &[0; 8]);
    assert_eq!(
        read_option_reply(&mut s).1,
        (1 << 31) + 3,
        "SET_META_CONTEXT before SR"
    );
    send_option(&mut s, 11, &[]);
    assert_eq!(
        read_option_reply(&mut s).1,
        (1 << 31) + 1,
        "EXTENDED_HEADERS: ERR_UNSUP"
    );
    send_option(&mut s, 2, &[]);
    assert_eq!(read_option_reply(&mut s), (2, 1, vec![]), "ABORT: ACK");
    assert!(closed_by_server(&mut s));

    // EXPORT_NAME without NO_ZEROES: 134 bytes; with: 10 bytes (checked in raw_transmission).
    let mut s = raw_connect(&server);
    s.write_all(&1u32.to_be_bytes()).unwrap();
    send_option(&mut s, 1, b"");
    let mut reply = [0u8; 134];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(u64::from_be_bytes(reply[0..8].try_into().unwrap()), MIB);
    assert!(reply[10..].iter().all(|&b| b == 0));
}

#[test]
fn raw_requests_unknown_oversize_and_read_only() {
    let dir = TempDir::new("rawreq");
    let img = image(&dir, "disk.img", 64 * MIB, b"");
    let server = Server::start(&dir, &img, &[]);
    let mut s = raw_transmission(&server);
    request(&mut s, 0, 99, 1, 0, 0);
    assert_eq!(simple_reply(&mut s), (22, 1), "unknown command: EINVAL");
    request(&mut s, 1 << 12, 0, 2, 0, 512);
    assert_eq!(simple_reply(&mut s), (22, 2), "unknown flag: EINVAL");
    request(&mut s, 0, 0, 3, 0, (32 << 20) + 4096);
    assert_eq!(simple_reply(&mut s), (22, 3), "oversize read: EINVAL");
    // Oversize write: the payload is consumed and the stream stays in sync.
    let big = (32u32 << 20) + 4096;
    request(&mut s, 0, 1, 4, 0, big);
    s.write_all(&vec![0x5a; big as usize]).unwrap();
    assert_eq!(simple_reply(&mut s), (22, 4), "oversize write: EINVAL");
    request(&mut s, 0, 1, 5, 4096, 4);
    s.write_all(b"abcd").unwrap();
    assert_eq!(simple_reply(&mut s), (0, 5));
    request(&mut s, 0, 0, 6, 4096, 4);
    assert_eq!(simple_reply(&mut s), (0, 6));
    let mut data = [0u8; 4];
    s.read_exact(&mut data).unwrap();
    assert_eq!(&data, b"abcd");
    // BLOCK_STATUS without a negotiated context: EINVAL (simple reply, no SR).
    request(&mut s, 0, 7, 7, 0, 4096);
    assert_eq!(simple_reply(&mut s), (22, 7));
    // DISC: the server closes after outstanding replies.
    request(&mut s, 0, 2, 8, 0, 0);
    assert!(closed_by_server(&mut s));
    drop(server);

    let server = Server::start(&dir, &img, &["--read-only"]);
    let mut s = raw_transmission(&server);
    request(&mut s, 0, 1, 9, 0, 65536);
    s.write_all(&[1u8; 65536]).unwrap();
    assert_eq!(simple_reply(&mut s), (1, 9), "write to read-only: EPERM");
    request(&mut s, 0, 0, 10, 4096, 4);
    assert_eq!(simple_reply(&mut s), (0, 10), "connection survives");
    let mut data = [0u8; 4];
    s.read_exact(&mut data).unwrap();
    assert_eq!(&data, b"abcd");
}

#[test]
fn raw_malformed_streams_do_not_hurt_the_server() {
    let dir = TempDir::new("rawbad");
    let img = image(&dir, "disk.img", 4 * MIB, b"");
    let mut server = Server::start(
        &dir,
        &img,
        &["--max-option-size", "4K", "--handshake-timeout", "1"],
    );
    let streams: Vec<(&str, Vec<u8>)> = vec![
        (
            "unknown client flags",
            0xffff_ffffu32.to_be_bytes().to_vec(),
        ),
        ("not fixed newstyle", 0u32.to_be_bytes().to_vec()),
        (
            "bad option magic",
            [&1u32.to_be_bytes()[..], &[0xab; 16]].concat(),
        ),
        (
            "option longer than the limit",
            [
                &1u32.to_be_bytes()[..],
                &IHAVEOPT.to_be_bytes(),
                &3u32.to_be_bytes(),
                &(1u32 << 20).to_be_bytes(),
            ]
            .concat(),
        ),
        (
            "EXPORT_NAME of an unknown export",
            [
                &1u32.to_be_bytes()[..],
                &IHAVEOPT.to_be_bytes(),
                &1u32.to_be_bytes(),
                &3u32.to_be_bytes(),
                b"xyz",
            ]
            .concat(),
        ),
        ("random bytes", pattern(3000, 5)),
    ];
    for (what, bytes) in streams {
        let mut s = raw_connect(&server);
        let _ = s.write_all(&bytes);
        assert!(
            closed_by_server(&mut s),
            "{what}: server kept the connection open"
        );
    }
    // A bad request magic after a good handshake ends that connection only.
    let mut s = raw_transmission(&server);
    s.write_all(&[0x42; 28]).unwrap();
    assert!(closed_by_server(&mut s), "bad request magic");
    // A client that vanishes mid-payload.
    let mut s = raw_transmission(&server);
    request(&mut s, 0, 1, 1, 0, 65536);
    s.write_all(&[7u8; 1000]).unwrap();
    drop(s);
    // A client that vanishes mid-handshake.
    let mut s = raw_connect(&server);
    s.write_all(&[0, 0]).unwrap();
    drop(s);
    // A client that stalls mid-handshake is closed after --handshake-timeout.
    let mut s = raw_connect(&server);
    s.write_all(&[0, 0]).unwrap();
    assert!(
        closed_by_server(&mut s),
        "stalled handshake was not timed out"
    );

    assert!(server.is_running(), "server died");
    let mut s = raw_transmission(&server);
    request(&mut s, 0, 0, 77, 0, 16);
    assert_eq!(
        simple_reply(&mut s),
        (0, 77),
        "server still serves after malformed input"
    );
    let mut data = [0u8; 16];
    s.read_exact(&mut data).unwrap();
    assert_eq!(
        data, [0u8; 16],
        "the vanished client's partial write was not applied"
    );
}

#[test]
fn raw_connection_limit() {
    let dir = TempDir::new("rawlimit");
    let img = image(&dir, "disk.img", MIB, b"");
    let server = Server::start(&dir, &img, &["--max-connections", "1"]);
    // Server::start's readiness probe took and released the only slot; wait until the
    // server has noticed that before taking it for good.
    let mut first = loop {
        let mut s = UnixStream::connect(&server.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut greeting = [0u8; 18];
        if s.read_exact(&mut greeting).is_ok() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut second = UnixStream::connect(&server.socket).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert!(
        closed_by_server(&mut second),
        "a second connection was served"
    );
    // The first connection is unaffected.
    first.write_all(&3u32.to_be_bytes()).unwrap();
    send_option(&mut first, 1, b"");
    let mut reply = [0u8; 10];
    first.read_exact(&mut reply).unwrap();
    assert_eq!(u64::from_be_bytes(reply[0..8].try_into().unwrap()), MIB);
}
