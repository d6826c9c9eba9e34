//! S3 locations and clients: `s3://BUCKET/PREFIX`, with the endpoint, region and
//! credentials found the way AWS's own tools find them, and larch's flags over those.
//!
//! Order, first found wins: the flags (`--s3-endpoint`, `--s3-region`, `--s3-profile`),
//! then the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_PROFILE`), then the profile's entries in `~/.aws/credentials` and `~/.aws/config`
//! (or `AWS_SHARED_CREDENTIALS_FILE`/`AWS_CONFIG_FILE`). Secrets never go in larch's own
//! files. Credentials from the profile's files are read again every
//! [`CREDENTIALS_REFRESH`], so that temporary ones a tool renews there keep working;
//! those from the environment cannot change while the process runs. Requests are retried
//! with backoff by the client (object_store's retry layer); [`Settings::stall`] bounds how
//! long one request may keep retrying, and each attempt has a time limit: short for small
//! requests, longer for data objects ([`transfer_timeout`]).
//!
//! One file with its unit tests (the code is under 800 lines): the tests reach the private
//! credential provider and the client router through an in-test HTTP server.

#[cfg(feature = "s3")]
use std::ffi::OsString;
use std::io;
#[cfg(feature = "s3")]
use std::ops::Range;
#[cfg(feature = "s3")]
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "s3")]
use std::sync::Mutex;
use std::time::Duration;
#[cfg(feature = "s3")]
use std::time::Instant;

#[cfg(feature = "s3")]
use bytes::Bytes;
#[cfg(feature = "s3")]
use futures_util::stream::BoxStream;
use object_store::ObjectStore;
#[cfg(feature = "s3")]
use object_store::aws::{AmazonS3Builder, AwsCredential, AwsCredentialProvider, S3ConditionalPut};
use object_store::path::Path as ObjPath;
#[cfg(feature = "s3")]
use object_store::{
    BackoffConfig, ClientOptions, CopyOptions, CredentialProvider, GetOptions, GetResult,
    ListResult, MultipartUpload, ObjectMeta, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RenameOptions, RetryConfig, StaticCredentialProvider,
};
use serde::{Deserialize, Serialize};

use crate::layout::MAX_OBJECT_BYTES;
use crate::volume::{MAX_UPLOADS, uploads_at_once};

/// A bucket and a prefix in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The bucket.
    pub bucket: String,
    /// The prefix ("" or without a trailing '/').
    pub prefix: String,
}

impl Location {
    /// Parses `s3://BUCKET` or `s3://BUCKET/PREFIX` for a new volume (`larch volume
    /// add`): the prefix must be of the characters [`check_prefix`] allows.
    pub fn parse(url: &str) -> Result<Location, LocationError> {
        let (location, refused) = Location::parse_recorded(url)?;
        match refused {
            Some(why) => Err(why),
            None => Ok(location),
        }
    }

    /// Parses the address of a volume the pool has already (at pool open): a prefix that
    /// [`Location::parse`] now refuses is still taken, with the reason as a warning, so
    /// that a pool made by an earlier larch keeps opening (its objects are under the
    /// prefix as object_store encodes it, and the collection of garbage matches that).
    pub fn parse_recorded(url: &str) -> Result<(Location, Option<LocationError>), LocationError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| LocationError::NotS3 {
                url: url.to_string(),
            })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(LocationError::Bucket {
                url: url.to_string(),
                bucket: bucket.to_string(),
            });
        }
        let prefix = prefix.trim_matches('/');
        let refused = check_prefix(prefix)
            .err()
            .map(|source| LocationError::Prefix {
                url: url.to_string(),
                prefix: prefix.to_string(),
                source,
            });
        let location = Location {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        };
        Ok((location, refused))
    }

    /// `s3://bucket/prefix`.
    pub fn display(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// Why an `s3://` address cannot be a volume's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// It does not start with `s3://`.
    #[error("{url:?} is not an s3:// address")]
    NotS3 {
        /// The address.
        url: String,
    },
    /// The bucket is not a bucket name.
    #[error("{url}: {bucket:?} is not a bucket name (3-63 lowercase letters, digits, '-', '.')")]
    Bucket {
        /// The address.
        url: String,
        /// Its bucket.
        bucket: String,
    },
    /// The prefix is of characters or segments [`check_prefix`] refuses.
    #[error(
        "{url}: the prefix {prefix:?} {source}; a prefix is made of letters, digits, '-', '_' \
         and '.', in segments separated by single '/' (no segment '.' or '..')"
    )]
    Prefix {
        /// The address.
        url: String,
        /// Its prefix, without a leading or trailing '/'.
        prefix: String,
        /// What is wrong with it.
        source: PrefixError,
    },
}

/// What is wrong with a prefix ([`check_prefix`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Two '/' in a row.
    #[error("has an empty segment ('//')")]
    EmptySegment,
    /// A '.' or '..' segment.
    #[error("has the segment {0:?}")]
    DotSegment(String),
    /// A character outside ASCII letters, digits, '-', '_' and '.'.
    #[error("has {character:?}{}", stored_note(.stored.as_deref()))]
    Character {
        /// The first such character.
        character: char,
        /// The prefix as the S3 client would store its keys, when it would encode it.
        stored: Option<String>,
    },
}

/// Where the S3 client would store the keys of a prefix it encodes, said so that the owner
/// of a volume added before the check (which no longer opens) knows where its objects are.
fn stored_note(stored: Option<&str>) -> String {
    match stored {
        Some(stored) => format!(" (the S3 client would store its keys under {stored:?})"),
        None => String::new(),
    }
}

/// Why `prefix` (without a leading or trailing '/') cannot be a volume's prefix, if it
/// cannot: its segments may hold only ASCII letters, digits, '-', '_' and '.', and none
/// may be empty, '.' or '..'.
///
/// object_store percent-encodes many other characters in each segment of a key (`~`,
/// `#`, `[`, `]`, `%`, `?`, `*`, `{`, `}`, `^`, `|`, `<`, `>`, `"`, the backslash and the
/// backtick, the controls, every byte of a non-ASCII character: its `path/parts.rs`), so
/// a volume at `s3://bucket/vol~1` would keep its objects under `vol%7E1/`, which is not
/// where `aws s3 ls s3://bucket/vol~1/` looks nor what the address in `pool.json` says.
/// The rest of what an S3 key may hold (a space, `+ = & $ @ : ; , ! ' ( )`) is refused as
/// well: AWS lists those as needing special handling (`+` reads as a space in some tools'
/// URLs; a space, `&` or `;` splits a shell command), and a volume's address is typed and
/// pasted into commands. A '.' or '..' segment names another place to any tool that takes
/// the key for a file path.
fn check_prefix(prefix: &str) -> Result<(), PrefixError> {
    if prefix.is_empty() {
        return Ok(());
    }
    for segment in prefix.split('/') {
        if segment.is_empty() {
            return Err(PrefixError::EmptySegment);
        }
        if segment == "." || segment == ".." {
            return Err(PrefixError::DotSegment(segment.to_string()));
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if let Some(character) = segment.chars().find(|&c| !allowed(c)) {
            let stored = ObjPath::from(prefix);
            return Err(PrefixError::Character {
                character,
                stored: (stored.as_ref() != prefix).then(|| stored.as_ref().to_string()),
            });
        }
    }
    Ok(())
}

/// How to reach the store, as the pool records it (no secrets).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// The endpoint (`http://127.0.0.1:7480`); `None`: AWS's, or the environment's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The region; `None`: the environment's or profile's, else `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The profile of `~/.aws/credentials` and `~/.aws/config`; `None`: `AWS_PROFILE`,
    /// else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// How long one request may keep being retried before it fails, seconds (default
    /// 30; keep it below the lease, which only a store that answers renews).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_secs: Option<u64>,
    /// How long the lease lasts unless renewed, seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u64>,
    /// The volume's object size (`--object-size`, its blocks without their trailers),
    /// bytes: how long an upload or whole read of one of its data objects may take is
    /// made from it ([`transfer_timeout`]). `None` (a volume added before it was
    /// recorded, or not known yet): the largest, 64 MiB, whose limit is never too short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_bytes: Option<u64>,
}

impl Settings {
    /// How long the lease lasts unless renewed (within the bounds [`Settings::check`]
    /// enforces).
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs.unwrap_or(60).clamp(2, MAX_LEASE_SECS))
    }

    /// How long one request may keep being retried (within the bounds
    /// [`Settings::check`] enforces).
    pub fn stall(&self) -> Duration {
        Duration::from_secs(self.stall_secs.unwrap_or(30).clamp(1, MAX_LEASE_SECS - 1))
    }

    /// Why these settings cannot be used, if they cannot: a lease of 2 s to
    /// [`MAX_LEASE_SECS`], and a stall of at least 1 s and below the lease (a node
    /// retrying past its lease would write after another node may have taken over).
    pub fn check(&self) -> Result<(), SettingsError> {
        let lease_secs = self.lease_secs.unwrap_or(60);
        let stall_secs = self.stall_secs.unwrap_or(30);
        if !(2..=MAX_LEASE_SECS).contains(&lease_secs) {
            return Err(SettingsError::Lease { lease_secs });
        }
        if stall_secs == 0 || stall_secs >= lease_secs {
            return Err(SettingsError::Stall {
                stall_secs,
                lease_secs,
            });
        }
        if let Some(bytes) = self.object_bytes
            && !(1..=MAX_OBJECT_BYTES).contains(&bytes)
        {
            return Err(SettingsError::ObjectSize { bytes });
        }
        Ok(())
    }

    /// How long each attempt of an upload or whole read of one of the volume's data
    /// objects may take ([`transfer_timeout`] of its object size, or of the largest).
    pub fn transfer_timeout(&self) -> Duration {
        transfer_timeout(self.object_bytes.unwrap_or(MAX_OBJECT_BYTES))
    }
}

/// Why [`Settings`] cannot be used ([`Settings::check`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A lease shorter than 2 s or longer than [`MAX_LEASE_SECS`].
    #[error("the lease of {lease_secs} s is not from 2 s to {MAX_LEASE_SECS} s (a day)")]
    Lease {
        /// The lease asked for.
        lease_secs: u64,
    },
    /// A stall bound of 0 or not below the lease.
    #[error(
        "the stall bound of {stall_secs} s is not from 1 s to below the lease ({lease_secs} s)"
    )]
    Stall {
        /// The stall bound asked for.
        stall_secs: u64,
        /// The lease.
        lease_secs: u64,
    },
    /// An object size of 0 or above [`MAX_OBJECT_BYTES`].
    #[error("an object size of {bytes} bytes is not from 1 byte to {MAX_OBJECT_BYTES}")]
    ObjectSize {
        /// The object size.
        bytes: u64,
    },
}

/// The longest lease accepted, seconds (a day): a lease is renewed every quarter of it,
/// and a node that stops makes others wait that long.
pub const MAX_LEASE_SECS: u64 = 86_400;

/// What every request attempt may take on top of its bytes: connecting, the store's own
/// time, and the small requests (roots, map pages, block reads) whole.
pub const BASE_TIMEOUT: Duration = Duration::from_secs(30);

/// The slowest the store and the link may carry the bytes of the data objects a commit
/// has in flight, together, without an attempt timing out: 1 MiB/s (about 8.4 Mbit/s).
pub const MIN_TRANSFER_RATE: u64 = 1 << 20;

/// How long each attempt of an upload or whole read of a data object may take, for
/// objects of `object_bytes` (the volume's object size; 0 or more than the largest counts
/// as the largest): [`BASE_TIMEOUT`] plus the time the bytes a commit has in flight
/// ([`uploads_at_once`] objects) take at [`MIN_TRANSFER_RATE`], since they share the
/// link. 32 s for 128 KiB objects, 46 s for 1 MiB, 94 s from 4 MiB on. (The 40-byte
/// trailer of each block, at most 1% more, rides on the base.)
pub fn transfer_timeout(object_bytes: u64) -> Duration {
    let object_bytes = match object_bytes {
        1..=MAX_OBJECT_BYTES => object_bytes,
        _ => MAX_OBJECT_BYTES,
    };
    let in_flight = uploads_at_once(object_bytes, MAX_UPLOADS) as u64 * object_bytes;
    // At most 64 MiB x 1000: no overflow.
    BASE_TIMEOUT + Duration::from_millis(in_flight * 1000 / MIN_TRANSFER_RATE)
}

/// How often credentials taken from a profile's files are read from them again: tools
/// that renew temporary credentials (`aws configure set` in a cron job, saml2aws, a
/// sidecar) rewrite the files, and a session token lasts an hour or more.
pub const CREDENTIALS_REFRESH: Duration = Duration::from_secs(60);

/// Without the `s3` feature there is no client: the message says how to get one.
#[cfg(not(feature = "s3"))]
pub fn client(location: &Location, _settings: &Settings) -> io::Result<Arc<dyn ObjectStore>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{}: this larch was built without S3 support (build it with the cargo feature `s3`)",
            location.display()
        ),
    ))
}

/// Looks up a variable of the process's environment (tests pass a map of their own, so
/// that they need not change the environment every test in the process shares).
#[cfg(feature = "s3")]
type Vars<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// A variable's value, when it is set, Unicode and not empty.
#[cfg(feature = "s3")]
fn var(vars: Vars<'_>, name: &str) -> Option<String> {
    vars(name)
        .and_then(|v| v.into_string().ok())
        .filter(|v| !v.is_empty())
}

#[cfg(feature = "s3")]
fn home_file(vars: Vars<'_>, name: &str, file: &str) -> Option<PathBuf> {
    if let Some(path) = vars(name) {
        return Some(PathBuf::from(path));
    }
    vars("HOME").map(|home| PathBuf::from(home).join(".aws").join(file))
}

/// The entries of one section of an AWS INI file (none if the file has no such section),
/// or why the file could not be read.
#[cfg(feature = "s3")]
fn ini_section(path: &std::path::Path, section: &str) -> Result<Vec<(String, String)>, IniError> {
    let ini = ini::Ini::load_from_file(path).map_err(|source| IniError {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(ini
        .section(Some(section))
        .map(|props| {
            props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default())
}

/// Why an AWS INI file could not be read.
#[cfg(feature = "s3")]
#[derive(Debug, thiserror::Error)]
#[error("reading {}: {source}", path.display())]
struct IniError {
    path: PathBuf,
    source: ini::Error,
}

/// A profile's two files, `~/.aws/credentials` and `~/.aws/config` (or where
/// `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE` say).
#[cfg(feature = "s3")]
#[derive(Clone, Debug)]
struct ProfileFiles {
    credentials: Option<PathBuf>,
    config: Option<PathBuf>,
    profile: String,
}

/// What a profile's files said when read, the credentials file's entries first.
#[cfg(feature = "s3")]
struct ProfileEntries {
    entries: Vec<(String, String)>,
    /// Why a file could not be read (a missing config file is normal: only said when the
    /// credentials are missing too).
    problems: Vec<IniError>,
}

#[cfg(feature = "s3")]
impl ProfileFiles {
    fn read(&self) -> ProfileEntries {
        let config_section = if self.profile == "default" {
            "default".to_string()
        } else {
            format!("profile {}", self.profile)
        };
        let mut found = ProfileEntries {
            entries: Vec::new(),
            problems: Vec::new(),
        };
        let files = [
            (&self.credentials, self.profile.as_str()),
            (&self.config, config_section.as_str()),
        ];
        for (path, section) in files {
            match path.as_deref().map(|p| ini_section(p, section)) {
                Some(Ok(entries)) => found.entries.extend(entries),
                Some(Err(why)) => found.problems.push(why),
                None => {}
            }
        }
        found
    }
}

#[cfg(feature = "s3")]
impl ProfileEntries {
    fn get(&self, key: &str) -> Option<String> {
        // An empty value counts as none, as the AWS tools take it.
        self.entries
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    }

    /// The key pair and, if there is one, the session token; `None` without both keys.
    fn credential(&self) -> Option<AwsCredential> {
        Some(AwsCredential {
            key_id: self.get("aws_access_key_id")?,
            secret_key: self.get("aws_secret_access_key")?,
            token: self.get("aws_session_token"),
        })
    }
}

/// Credentials from a profile's files, read again when the copy held is older than the
/// refresh interval, so that temporary credentials a tool renews in the files keep the
/// volume working past the first token's expiry. A read that fails or finds no keys (a
/// file being rewritten, removed, damaged) keeps the last good credentials: they may well
/// still be valid, and none at all would fail every request at once. That is said once
/// per run of failed reads, not at every request.
#[cfg(feature = "s3")]
struct ProfileCredentials {
    files: ProfileFiles,
    every: Duration,
    display: String,
    held: Mutex<HeldCredential>,
}

#[cfg(feature = "s3")]
struct HeldCredential {
    credential: Arc<AwsCredential>,
    /// When the files are to be read again.
    due: Instant,
    /// Whether the last read failed (and that was said).
    failing: bool,
}

#[cfg(feature = "s3")]
impl std::fmt::Debug for ProfileCredentials {
    // The secrets stay out of any debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileCredentials")
            .field("files", &self.files)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "s3")]
impl ProfileCredentials {
    /// Credentials first read as `credential` from `files`, read again every `every` (at
    /// most a day, so that the next read's time cannot overflow).
    fn new(
        files: ProfileFiles,
        credential: AwsCredential,
        every: Duration,
        display: &str,
    ) -> ProfileCredentials {
        let every = every.min(Duration::from_secs(86_400));
        ProfileCredentials {
            files,
            every,
            display: display.to_string(),
            held: Mutex::new(HeldCredential {
                credential: Arc::new(credential),
                due: Instant::now() + every,
                failing: false,
            }),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HeldCredential> {
        // Nothing panics while the lock is held; a poisoned one still holds good data.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The credentials to sign the next request with, read from the files again first
    /// when they are due.
    fn current(&self) -> Arc<AwsCredential> {
        {
            let mut held = self.held();
            let now = Instant::now();
            if now < held.due {
                return Arc::clone(&held.credential);
            }
            // This caller reads; the requests that come meanwhile use the copy held
            // rather than all reading the files at once.
            held.due = now + self.every;
        }
        // Two small local files, once a minute: read here, without the lock, rather
        // than on a thread of their own.
        let read = self.files.read();
        let mut held = self.held();
        match read.credential() {
            Some(credential) => {
                if held.failing {
                    eprintln!(
                        "larch: {}: read the credentials of profile {:?} again (key {})",
                        self.display, self.files.profile, credential.key_id
                    );
                }
                held.failing = false;
                held.credential = Arc::new(credential);
            }
            None if !held.failing => {
                held.failing = true;
                let problems: Vec<String> = read.problems.iter().map(|p| p.to_string()).collect();
                let mut why = problems.join("; ");
                if why.is_empty() {
                    why = "no aws_access_key_id and aws_secret_access_key in it".into();
                }
                eprintln!(
                    "larch: {}: could not read the credentials of profile {:?} again ({why}); \
                     still signing with the last ones read (key {}), which fail once they \
                     expire; trying again every {} s",
                    self.display,
                    self.files.profile,
                    held.credential.key_id,
                    self.every.as_secs()
                );
            }
            None => {}
        }
        Arc::clone(&held.credential)
    }
}

#[cfg(feature = "s3")]
#[async_trait::async_trait]
impl CredentialProvider for ProfileCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        Ok(self.current())
    }
}

/// A client for `location` with `settings`. Fails when no credentials are found (an
/// anonymous client would only meet "access denied" later, with less to go on). Prints a
/// warning when the credentials include a session token from the environment, which
/// cannot be renewed while the process runs.
#[cfg(feature = "s3")]
pub fn client(location: &Location, settings: &Settings) -> io::Result<Arc<dyn ObjectStore>> {
    let vars = |name: &str| std::env::var_os(name);
    let (store, warning) = client_with(location, settings, &vars, CREDENTIALS_REFRESH)?;
    if let Some(warning) = warning {
        eprintln!("larch: warning: {warning}");
    }
    Ok(store)
}

/// [`client`], with the environment looked up through `vars` and a profile's credentials
/// read again every `refresh`; also returns the warning to give, if any.
#[cfg(feature = "s3")]
fn client_with(
    location: &Location,
    settings: &Settings,
    vars: Vars<'_>,
    refresh: Duration,
) -> io::Result<(Arc<dyn ObjectStore>, Option<String>)> {
    // HTTPS endpoints use rustls with the ring provider (the one larch's NBD TLS uses);
    // installed once per process, a second install is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let display = location.display();
    let profile = settings
        .profile
        .clone()
        .or_else(|| var(vars, "AWS_PROFILE"))
        .unwrap_or_else(|| "default".into());
    let files = ProfileFiles {
        credentials: home_file(vars, "AWS_SHARED_CREDENTIALS_FILE", "credentials"),
        config: home_file(vars, "AWS_CONFIG_FILE", "config"),
        profile: profile.clone(),
    };
    let found = files.read();
    let mut warning = None;
    let env_keys = (
        var(vars, "AWS_ACCESS_KEY_ID"),
        var(vars, "AWS_SECRET_ACCESS_KEY"),
    );
    let credentials: AwsCredentialProvider = match env_keys {
        (Some(key_id), Some(secret_key)) if settings.profile.is_none() => {
            // The process's environment is fixed at its start: these are used as they are
            // for as long as it runs.
            let token = var(vars, "AWS_SESSION_TOKEN");
            if token.is_some() {
                warning = Some(format!(
                    "{display}: the credentials come from AWS_ACCESS_KEY_ID, \
                     AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, which a running process \
                     cannot see renewed: once that session token expires, the store refuses \
                     every request and the volume fails until larch is restarted with new \
                     ones. For temporary credentials, unset these variables (or give \
                     --s3-profile) and keep them in a profile of ~/.aws/credentials that a \
                     tool renews: larch reads it again every {} s.",
                    refresh.as_secs()
                ));
            }
            Arc::new(StaticCredentialProvider::new(AwsCredential {
                key_id,
                secret_key,
                token,
            }))
        }
        _ => match found.credential() {
            Some(credential) => Arc::new(ProfileCredentials::new(
                files, credential, refresh, &display,
            )),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{display}: no credentials: set AWS_ACCESS_KEY_ID and \
                         AWS_SECRET_ACCESS_KEY, or give profile {profile:?} aws_access_key_id \
                         and aws_secret_access_key in ~/.aws/credentials"
                    ),
                ));
            }
        },
    };
    let region = settings
        .region
        .clone()
        .or_else(|| var(vars, "AWS_REGION"))
        .or_else(|| var(vars, "AWS_DEFAULT_REGION"))
        .or_else(|| found.get("region"))
        .unwrap_or_else(|| "us-east-1".into());
    let endpoint = settings
        .endpoint
        .clone()
        .or_else(|| var(vars, "AWS_ENDPOINT_URL_S3"))
        .or_else(|| var(vars, "AWS_ENDPOINT_URL"))
        .or_else(|| found.get("endpoint_url"));
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&location.bucket)
        .with_region(region)
        .with_credentials(credentials)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        // Every PUT carries the SHA-256 of its body in `x-amz-content-sha256`, under the
        // signature, and the store checks the body it received against it before it
        // stores anything (AWS and Ceph's gateway answer 400 XAmzContentSHA256Mismatch):
        // a body damaged on the way (a proxy, a bad NIC, plain HTTP) is refused while its
        // bytes are still in this node's memory, not found at a later read. object_store
        // does this by default; said here so that no one trades it for the CPU it costs.
        .with_unsigned_payload(false);
    let mut allow_http = false;
    if let Some(endpoint) = endpoint {
        // An endpoint of the user's own (a gateway, MinIO, ...): path-style addressing,
        // and plain HTTP when the address says so.
        allow_http = endpoint.starts_with("http://");
        builder = builder
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false);
    }
    let stall = settings.stall();
    // One client per kind of request, alike but for their time limits (see `Routed`).
    let build = |timeout: Duration, retry_timeout: Duration| {
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: 1000,
            retry_timeout,
        };
        let options = ClientOptions::new()
            .with_timeout(timeout)
            .with_connect_timeout(Duration::from_secs(5))
            .with_allow_http(allow_http);
        builder
            .clone()
            .with_retry(retry)
            .with_client_options(options)
            .build()
            .map_err(|e| io::Error::other(format!("{display}: {e}")))
    };
    // Small requests: an attempt never outlasts the stall bound, which is below the
    // lease, so a renewal stuck on a dead connection is given up and tried again while
    // the lease still runs.
    let quick = build(BASE_TIMEOUT.min(stall), stall)?;
    // Data objects: an attempt may take what their bytes need at the minimum rate. A
    // request is tried again only while the stall bound has not passed since it began,
    // and one attempt may now take longer than that bound: counting the bound from the
    // end of the first attempt's time keeps an outage of that long during the transfer
    // ridden out, as it is for small requests.
    let transfer = settings.transfer_timeout();
    let bulk = build(transfer, stall + transfer)?;
    let routed = Routed::new(Arc::new(quick), Arc::new(bulk), &location.prefix);
    Ok((Arc::new(routed), warning))
}

/// How many times a PUT whose body the store refused as damaged on the way is sent
/// again before the refusal fails it.
#[cfg(feature = "s3")]
const BODY_REFUSED_RETRIES: u32 = 3;

/// Whether the store refused a PUT because the body it received did not match the signed
/// SHA-256 of the request (`XAmzContentSHA256Mismatch`: AWS, Ceph's gateway). The client
/// gives such an answer as an error whose text carries the store's code.
#[cfg(feature = "s3")]
fn body_refused(err: &object_store::Error) -> bool {
    err.to_string().contains("XAmzContentSHA256Mismatch")
}

/// The store larch's volumes talk to: two clients of one store that differ only in how
/// long an attempt may take. Uploads and whole reads of data objects (up to 64 MiB each)
/// go to `bulk`, whose attempts may take as long as their bytes need; everything else —
/// the root (whose writes renew the lease), map pages, one block's ranged read, listings,
/// deletes — goes to `quick`, whose attempts keep a short limit. One limit for both would
/// be either too short for a large object on an ordinary link (every attempt timing out
/// and starting over) or, for a renewal on a dead connection, longer than the lease.
#[cfg(feature = "s3")]
#[derive(Debug)]
struct Routed {
    quick: Arc<dyn ObjectStore>,
    bulk: Arc<dyn ObjectStore>,
    /// The start of every data object's key: `PREFIX/data/`, as the store's paths write it.
    data: String,
}

#[cfg(feature = "s3")]
impl Routed {
    fn new(quick: Arc<dyn ObjectStore>, bulk: Arc<dyn ObjectStore>, prefix: &str) -> Routed {
        let dir = if prefix.is_empty() {
            "data".to_string()
        } else {
            format!("{prefix}/data")
        };
        // Built as the volume builds its keys, so that characters the path encodes are
        // encoded alike on both sides.
        let data = format!("{}/", ObjPath::from(dir));
        Routed { quick, bulk, data }
    }

    fn store_for_put(&self, location: &ObjPath) -> &Arc<dyn ObjectStore> {
        if location.as_ref().starts_with(&self.data) {
            &self.bulk
        } else {
            &self.quick
        }
    }

    fn store_for_get(&self, location: &ObjPath, options: &GetOptions) -> &Arc<dyn ObjectStore> {
        // Only a whole data object is large; a ranged read of one is one block.
        if options.range.is_none() && !options.head {
            self.store_for_put(location)
        } else {
            &self.quick
        }
    }
}

#[cfg(feature = "s3")]
impl std::fmt::Display for Routed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.quick.fmt(f)
    }
}

#[cfg(feature = "s3")]
#[async_trait::async_trait]
impl ObjectStore for Routed {
    async fn put_opts(
        &self,
        location: &ObjPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let store = self.store_for_put(location);
        // A body the store refused as damaged on the way was not stored (the store checks
        // it against its signed SHA-256 before anything else): sending it again is safe,
        // conditional or not, and on a link that flipped a bit once it gets through.
        let mut refused = 0;
        loop {
            match store
                .put_opts(location, payload.clone(), opts.clone())
                .await
            {
                Err(err) if refused < BODY_REFUSED_RETRIES && body_refused(&err) => {
                    refused += 1;
                }
                other => return other,
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let store = self.store_for_put(location);
        store.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let store = self.store_for_get(location, &options);
        store.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &ObjPath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.quick.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjPath>> {
        self.quick.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.quick.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&ObjPath>,
        offset: &ObjPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.quick.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjPath>,
    ) -> object_store::Result<ListResult> {
        self.quick.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjPath,
        to: &ObjPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.quick.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &ObjPath,
        to: &ObjPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.quick.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_lease_and_stall_settings_are_refused_and_never_overflow() {
        let with = |lease: Option<u64>, stall: Option<u64>| Settings {
            lease_secs: lease,
            stall_secs: stall,
            ..Settings::default()
        };
        assert_eq!(with(None, None).check(), Ok(()));
        assert_eq!(with(Some(MAX_LEASE_SECS), Some(30)).check(), Ok(()));
        let huge = with(Some(u64::MAX), None);
        let err = huge.check().unwrap_err().to_string();
        assert!(err.contains(&u64::MAX.to_string()), "{err}");
        assert_eq!(huge.lease(), Duration::from_secs(MAX_LEASE_SECS));
        assert!(with(Some(1), None).check().is_err());
        assert!(with(Some(60), Some(0)).check().is_err());
        assert!(with(Some(60), Some(60)).check().is_err());
        assert!(with(None, Some(u64::MAX)).stall() < huge.lease());
    }

    /// Each attempt of a data object's transfer may take 30 s plus the time the bytes in
    /// flight take at 1 MiB/s; before, 30 s for any size, which 16 uploads of 16 or
    /// 64 MiB at once never meet on an ordinary link.
    #[test]
    fn transfer_timeouts_grow_with_the_bytes_in_flight() {
        const KIB: u64 = 1 << 10;
        const MIB: u64 = 1 << 20;
        for (object_bytes, millis) in [
            (4 * KIB, 30_062),
            (128 * KIB, 32_000),
            (MIB, 46_000),
            (4 * MIB, 94_000),
            (16 * MIB, 94_000),
            (64 * MIB, 94_000),
            // Nonsense counts as the largest object: the longest limit, never a shorter.
            (0, 94_000),
            (u64::MAX, 94_000),
        ] {
            assert_eq!(
                transfer_timeout(object_bytes),
                Duration::from_millis(millis),
                "{object_bytes}"
            );
        }
        let settings = |object_bytes| Settings {
            object_bytes,
            ..Settings::default()
        };
        assert_eq!(
            settings(None).transfer_timeout(),
            Duration::from_secs(94),
            "an object size not recorded counts as the largest"
        );
        assert_eq!(
            settings(Some(128 * KIB)).transfer_timeout(),
            Duration::from_secs(32)
        );
        assert_eq!(settings(Some(MIB)).check(), Ok(()));
        assert!(settings(Some(0)).check().is_err());
        assert!(settings(Some(64 * MIB + 1)).check().is_err());
    }

    #[test]
    fn locations_parse_or_say_why_not() {
        let l = Location::parse("s3://larch-test/vols/a/").unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("larch-test", "vols/a")
        );
        assert_eq!(l.display(), "s3://larch-test/vols/a");
        assert_eq!(Location::parse("s3://bucket").unwrap().prefix, "");
        for bad in [
            "/tmp/x",
            "s3://",
            "s3://A_B/x",
            "s3://ab/../x",
            "s3://abc/x//y",
        ] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }

    /// The prefixes of the tests, the benchmarks and the docs, and others of letters,
    /// digits, '-', '_' and '.', are accepted as they are (slashes at the ends dropped).
    #[test]
    fn prefixes_of_the_allowed_characters_are_accepted() {
        for (url, prefix) in [
            ("s3://bucket", ""),
            ("s3://bucket/", ""),
            ("s3://larch/rr", "rr"),
            ("s3://larch/crash-3", "crash-3"),
            ("s3://my-bucket/volumes/db", "volumes/db"),
            ("s3://bucket/vols/objs/", "vols/objs"),
            ("s3://bucket//vols/a", "vols/a"),
            (
                "s3://b.c-d/Tank_2/v1.2/.hidden/...",
                "Tank_2/v1.2/.hidden/...",
            ),
        ] {
            let location = Location::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(location.prefix, prefix, "{url}");
            // What the volume stores its keys under is what the address says.
            assert_eq!(ObjPath::from(prefix).as_ref(), prefix, "{url}");
        }
    }

    /// A prefix with a character object_store percent-encodes would keep its objects
    /// under another name than the address says (before, `s3://b/vol~1` stored them under
    /// `vol%7E1/`, and the collection of garbage never matched them); one with a character
    /// S3 lists as needing special handling, an empty, '.' or '..' segment is refused too.
    /// The message names what is wrong and what is allowed.
    #[test]
    fn prefixes_with_other_characters_or_segments_are_refused_and_say_why() {
        let refused = |url: &str| {
            let err = Location::parse(url).expect_err(url).to_string();
            assert!(
                err.contains("letters, digits, '-', '_' and '.'"),
                "{url}: {err}"
            );
            err
        };
        // A pool made before the check still opens such a volume, with the reason.
        let (recorded, warning) = Location::parse_recorded("s3://bucket/vols/vol~1").unwrap();
        assert_eq!(recorded.prefix, "vols/vol~1");
        assert!(warning.is_some_and(|w| w.to_string().contains("has '~'")));
        let err = refused("s3://bucket/vols/vol~1");
        assert!(
            err.contains("has '~'") && err.contains("\"vols/vol%7E1\""),
            "{err}"
        );
        // object_store encodes these.
        for c in "~#[]%?*\\{}^|<>\"`\t\u{7f}é".chars() {
            let err = refused(&format!("s3://bucket/vols/a{c}b"));
            assert!(err.contains(&format!("has {c:?}")), "{c:?}: {err}");
            assert!(err.contains("would store its keys under"), "{c:?}: {err}");
        }
        // S3 keys may hold these, but AWS lists them as needing special handling.
        for c in " +=&$@:;,!'()".chars() {
            let err = refused(&format!("s3://bucket/a{c}b/v"));
            assert!(err.contains(&format!("has {c:?}")), "{c:?}: {err}");
            assert!(!err.contains("would store its keys under"), "{c:?}: {err}");
        }
        for (url, why) in [
            ("s3://bucket/a//b", "an empty segment"),
            ("s3://bucket/a/./b", "the segment \".\""),
            ("s3://bucket/../b", "the segment \"..\""),
            ("s3://bucket/a/..", "the segment \"..\""),
        ] {
            let err = refused(url);
            assert!(err.contains(why), "{url}: {err}");
        }
    }

    /// A directory of its own for one test's files, removed when dropped.
    #[cfg(feature = "s3")]
    struct TempDir(PathBuf);

    #[cfg(feature = "s3")]
    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "larch-object-{name}-{}-{:?}",
                std::process::id(),
                Instant::now()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    #[cfg(feature = "s3")]
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Writes a credentials file of profile `default` (what `aws sso`, a
    /// credential_process wrapper or a sidecar does when it renews them).
    #[cfg(feature = "s3")]
    fn write_credentials(path: &std::path::Path, key_id: &str, token: &str) {
        let text = format!(
            "[default]\naws_access_key_id = {key_id}\naws_secret_access_key = secret-of-{key_id}\n\
             aws_session_token = {token}\n"
        );
        std::fs::write(path, text).unwrap();
    }

    /// Temporary credentials from a profile's file are read again once the copy held is
    /// older than the interval: the new key and token are used from then on. A file that
    /// becomes empty, unreadable or is removed keeps the last good ones. Before, the
    /// credentials were read once, and the volume failed for good when the token expired.
    #[cfg(feature = "s3")]
    #[test]
    fn profile_credentials_are_read_again_and_the_last_good_ones_kept() {
        let dir = TempDir::new("profile");
        let path = dir.0.join("credentials");
        write_credentials(&path, "KEY1", "token1");
        let files = ProfileFiles {
            credentials: Some(path.clone()),
            config: Some(dir.0.join("no-config")),
            profile: "default".into(),
        };
        let first = || files.read().credential().unwrap();
        let every_time = ProfileCredentials::new(files.clone(), first(), Duration::ZERO, "t");
        let hourly =
            ProfileCredentials::new(files.clone(), first(), Duration::from_secs(3600), "t");
        let now = |p: &ProfileCredentials| {
            let c = p.current();
            (c.key_id.clone(), c.secret_key.clone(), c.token.clone())
        };
        let is = |key: &str, token: &str| {
            (
                key.to_string(),
                format!("secret-of-{key}"),
                Some(token.to_string()),
            )
        };
        assert_eq!(now(&every_time), is("KEY1", "token1"));
        write_credentials(&path, "KEY2", "token2");
        assert_eq!(now(&every_time), is("KEY2", "token2"));
        assert_eq!(now(&hourly), is("KEY1", "token1"), "read before it is due");
        // Emptied (a tool that truncates and then writes), damaged, removed.
        std::fs::write(&path, "").unwrap();
        assert_eq!(now(&every_time), is("KEY2", "token2"));
        assert!(every_time.held().failing);
        std::fs::write(&path, "[default]\naws_access_key_id = KEY3\n").unwrap();
        assert_eq!(
            now(&every_time),
            is("KEY2", "token2"),
            "a key without its secret"
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(now(&every_time), is("KEY2", "token2"));
        write_credentials(&path, "KEY4", "token4");
        assert_eq!(now(&every_time), is("KEY4", "token4"));
        assert!(!every_time.held().failing);
    }

    /// One request as a test store received it.
    #[cfg(feature = "s3")]
    #[derive(Debug)]
    struct Request {
        method: String,
        /// The headers, their names in lower case.
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    #[cfg(feature = "s3")]
    impl Request {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }

        /// The key id of the `Authorization` header and the session token, if any.
        fn credentials(&self) -> (String, Option<String>) {
            let authorization = self.header("authorization").unwrap_or("");
            let after = authorization.split("Credential=").nth(1).unwrap_or("");
            let key_id = after.split('/').next().unwrap_or("").to_string();
            let token = self.header("x-amz-security-token").map(str::to_string);
            (key_id, token)
        }
    }

    /// The requests a test store received, one at a time.
    #[cfg(feature = "s3")]
    type Seen = std::sync::mpsc::Receiver<Request>;

    /// A store on 127.0.0.1 that answers every request with `answer` (a whole HTTP/1.1
    /// response, which closes the connection) and notes what it received.
    #[cfg(feature = "s3")]
    fn recording_store(answer: &'static [u8]) -> (String, Seen) {
        recording_store_answering(vec![answer])
    }

    /// As [`recording_store`], answering the first request with the first answer, the
    /// second with the second, and so on, the last answer for the rest.
    #[cfg(feature = "s3")]
    fn recording_store_answering(answers: Vec<&'static [u8]>) -> (String, Seen) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { return };
                let answer = answers[n.min(answers.len() - 1)];
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = Request {
                    method: String::new(),
                    headers: Vec::new(),
                    body: Vec::new(),
                };
                let mut line = String::new();
                if reader.read_line(&mut line).is_ok() {
                    request.method = line.split(' ').next().unwrap_or("").to_string();
                }
                line.clear();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    let header = line.trim_end().to_string();
                    line.clear();
                    if header.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        let name = name.trim().to_ascii_lowercase();
                        request.headers.push((name, value.trim().to_string()));
                    }
                }
                // The body, read whole before answering (the client sends it at once).
                let length = request
                    .header("content-length")
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                request.body = vec![0; length];
                let _ = reader.read_exact(&mut request.body);
                let _ = stream.write_all(answer);
                if tx.send(request).is_err() {
                    return;
                }
            }
        });
        (address, rx)
    }

    /// An answer of "no such key".
    #[cfg(feature = "s3")]
    const NOT_FOUND: &[u8] =
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

    /// A client whose credentials come from a profile's file signs its requests with the
    /// credentials the file holds now, not the ones it held at the start.
    #[cfg(feature = "s3")]
    #[test]
    fn requests_are_signed_with_the_credentials_read_again() {
        use object_store::ObjectStoreExt;
        let dir = TempDir::new("signed");
        let path = dir.0.join("credentials");
        write_credentials(&path, "KEY1", "token1");
        let (endpoint, seen) = recording_store(NOT_FOUND);
        let settings = Settings {
            endpoint: Some(endpoint),
            ..Settings::default()
        };
        let vars = |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(path.clone().into_os_string()),
            "AWS_CONFIG_FILE" => Some(dir.0.join("no-config").into_os_string()),
            _ => None,
        };
        let location = Location::parse("s3://bucket/vols/a").unwrap();
        let (store, warning) = client_with(&location, &settings, &vars, Duration::ZERO).unwrap();
        assert_eq!(warning, None);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let head = || {
            let store = Arc::clone(&store);
            let got = runtime.block_on(async move { store.head(&ObjPath::from("x")).await });
            assert!(
                matches!(got, Err(object_store::Error::NotFound { .. })),
                "{got:?}"
            );
            seen.recv_timeout(Duration::from_secs(10))
                .unwrap()
                .credentials()
        };
        assert_eq!(head(), ("KEY1".into(), Some("token1".into())));
        write_credentials(&path, "KEY2", "token2");
        assert_eq!(head(), ("KEY2".into(), Some("token2".into())));
        std::fs::write(&path, "").unwrap();
        assert_eq!(head(), ("KEY2".into(), Some("token2".into())));
    }

    /// The body the PUT tests send.
    #[cfg(feature = "s3")]
    const BODY: &[u8] = b"larch block bytes";
    /// A store's answer to a PUT it stored.
    #[cfg(feature = "s3")]
    const STORED: &[u8] = b"HTTP/1.1 200 OK\r\netag: \"1\"\r\ncontent-length: 0\r\n\
                            connection: close\r\n\r\n";
    /// A store's answer to a PUT whose body did not match its signed SHA-256.
    #[cfg(feature = "s3")]
    const MISMATCH: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/xml\r\n\
                              content-length: 74\r\nconnection: close\r\n\r\n\
                              <?xml version=\"1.0\"?><Error><Code>XAmzContentSHA256Mismatch\
                              </Code></Error>";

    /// An environment with static keys and nothing else.
    #[cfg(feature = "s3")]
    fn keys_only(name: &str) -> Option<std::ffi::OsString> {
        match name {
            "AWS_ACCESS_KEY_ID" => Some("KEY".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".into()),
            _ => None,
        }
    }

    /// PUTs [`BODY`] at `key` through a client (static keys) of a recording store that
    /// gives `answers` (see [`recording_store_answering`]): the PUT's outcome, and what
    /// the store received.
    #[cfg(feature = "s3")]
    fn put_body(
        key: &str,
        answers: Vec<&'static [u8]>,
    ) -> (object_store::Result<object_store::PutResult>, Seen) {
        use object_store::ObjectStoreExt;
        let (endpoint, seen) = recording_store_answering(answers);
        let settings = Settings {
            endpoint: Some(endpoint),
            ..Settings::default()
        };
        let location = Location::parse("s3://bucket/vols/a").unwrap();
        let (store, _) =
            client_with(&location, &settings, &keys_only, CREDENTIALS_REFRESH).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = runtime.block_on(store.put(&ObjPath::from(key), PutPayload::from_static(BODY)));
        (got, seen)
    }

    /// Every PUT carries the SHA-256 of its body in `x-amz-content-sha256`, among the
    /// signed headers: the store checks the body it received against it, so a body
    /// damaged on the way is refused at the PUT instead of stored. A refusal that lasts
    /// (400 XAmzContentSHA256Mismatch to every attempt) fails the PUT, naming it.
    #[cfg(feature = "s3")]
    #[test]
    fn puts_carry_the_signed_sha256_of_their_body_and_a_refusal_fails_them() {
        // `printf 'larch block bytes' | sha256sum`
        const BODY_SHA256: &str =
            "726b1690acd42c13ad515947db33c9b684f3e07fcfe656e364b5091c875320fc";
        // A data object's key, which goes to the bulk client, and the root's, which goes
        // to the quick one: both are built alike.
        let put = |answer: &'static [u8]| {
            [
                "vols/a/data/000000000000-0000000000000001-0000000000000001",
                "vols/a/larch-volume",
            ]
            .map(|key| {
                let (got, seen) = put_body(key, vec![answer]);
                (got, seen.recv_timeout(Duration::from_secs(10)).unwrap())
            })
        };
        for (got, request) in put(STORED) {
            assert!(got.is_ok(), "{got:?}");
            assert_eq!(request.method, "PUT");
            assert_eq!(request.body, BODY);
            assert_eq!(
                request.header("x-amz-content-sha256"),
                Some(BODY_SHA256),
                "{request:?}"
            );
            let authorization = request.header("authorization").unwrap_or("");
            let signed = authorization
                .split("SignedHeaders=")
                .nth(1)
                .and_then(|rest| rest.split(',').next())
                .unwrap_or("");
            assert!(
                signed.split(';').any(|h| h == "x-amz-content-sha256"),
                "{authorization}"
            );
        }
        for (got, _) in put(MISMATCH) {
            let err = got.expect_err("a refused body");
            assert!(
                err.to_string().contains("XAmzContentSHA256Mismatch"),
                "{err}"
            );
        }
    }

    /// A PUT the store refused as damaged on the way is sent again, the same body, and
    /// succeeds when the next attempt gets through; one refused every time is sent
    /// [`BODY_REFUSED_RETRIES`] more times, then fails.
    #[cfg(feature = "s3")]
    #[test]
    fn a_put_refused_as_damaged_is_sent_again() {
        let key = "vols/a/data/000000000000-0000000000000001-0000000000000001";
        // The server records each request just after answering it: wait for the number
        // expected, then make sure no other follows.
        let requests = |seen: &Seen, expected: usize| {
            let got: Vec<_> = (0..expected)
                .map(|_| seen.recv_timeout(Duration::from_secs(10)).unwrap())
                .collect();
            assert!(seen.recv_timeout(Duration::from_millis(300)).is_err());
            got
        };
        let (got, seen) = put_body(key, vec![MISMATCH, STORED]);
        assert!(got.is_ok(), "{got:?}");
        let sent = requests(&seen, 2);
        assert!(sent.iter().all(|r| r.method == "PUT" && r.body == BODY));
        let (got, seen) = put_body(key, vec![MISMATCH]);
        let err = got.expect_err("a body refused every time");
        assert!(
            err.to_string().contains("XAmzContentSHA256Mismatch"),
            "{err}"
        );
        requests(&seen, 1 + BODY_REFUSED_RETRIES as usize);
    }

    /// Keys in the environment are used as they are; with a session token among them the
    /// client says that the volume fails when it expires, and what to do instead.
    #[cfg(feature = "s3")]
    #[test]
    fn a_session_token_from_the_environment_is_warned_about() {
        let location = Location::parse("s3://bucket/vols/a").unwrap();
        let settings = Settings::default();
        let with_token = |token: bool| {
            move |name: &str| match name {
                "AWS_ACCESS_KEY_ID" => Some("ENVKEY".into()),
                "AWS_SECRET_ACCESS_KEY" => Some("secret".into()),
                "AWS_SESSION_TOKEN" if token => Some("token".into()),
                _ => None,
            }
        };
        let (_, warning) = client_with(
            &location,
            &settings,
            &with_token(false),
            CREDENTIALS_REFRESH,
        )
        .unwrap();
        assert_eq!(warning, None);
        let (_, warning) =
            client_with(&location, &settings, &with_token(true), CREDENTIALS_REFRESH).unwrap();
        let warning = warning.expect("a warning");
        assert!(
            warning.contains("AWS_SESSION_TOKEN") && warning.contains("every 60 s"),
            "{warning}"
        );
        let none = |_: &str| None;
        let err = client_with(&location, &settings, &none, CREDENTIALS_REFRESH).unwrap_err();
        assert!(err.to_string().contains("no credentials"), "{err}");
    }

    /// Uploads and whole reads of data objects go to the client with the long time limit;
    /// everything else (the root, map pages, one block's ranged read) to the quick one.
    #[cfg(feature = "s3")]
    #[test]
    fn data_object_transfers_go_to_the_bulk_client_and_the_rest_to_the_quick_one() {
        use object_store::ObjectStoreExt;
        use object_store::memory::InMemory;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for prefix in ["", "vols/a", "vols/a b~c"] {
            let quick: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            let bulk: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            let routed = Routed::new(Arc::clone(&quick), Arc::clone(&bulk), prefix);
            let slash = if prefix.is_empty() { "" } else { "/" };
            // Keys as the volume makes them.
            let key = |name: &str| ObjPath::from(format!("{prefix}{slash}{name}"));
            let data = key("data/000000000000-0000000000000001-0000000000000001");
            let (root, page) = (key("larch-volume"), key("map/00000000-0000000000000001-1"));
            runtime.block_on(async {
                for path in [&data, &root, &page] {
                    routed
                        .put(path, PutPayload::from_static(b"bytes"))
                        .await
                        .unwrap();
                }
                assert!(bulk.head(&data).await.is_ok(), "{prefix:?}");
                assert!(quick.head(&data).await.is_err(), "{prefix:?}");
                for path in [&root, &page] {
                    assert!(quick.head(path).await.is_ok(), "{prefix:?}");
                    assert!(bulk.head(path).await.is_err(), "{prefix:?}");
                }
                // A whole read of a data object is the bulk client's; a ranged one, the
                // quick client's (which does not hold it here).
                assert!(routed.get(&data).await.is_ok(), "{prefix:?}");
                assert!(routed.get_range(&data, 0..2).await.is_err(), "{prefix:?}");
                assert!(routed.get(&root).await.is_ok(), "{prefix:?}");
            });
        }
    }
}
