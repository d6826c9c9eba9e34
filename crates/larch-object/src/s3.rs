//! S3 locations and clients: `s3://BUCKET/PREFIX`, with the endpoint, region and
//! credentials found the way AWS's own tools find them, and larch's flags over those.
//!
//! Order, first found wins: the flags (`--s3-endpoint`, `--s3-region`, `--s3-profile`),
//! then the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_PROFILE`), then the profile's entries in `~/.aws/credentials` and `~/.aws/config`
//! (or `AWS_SHARED_CREDENTIALS_FILE`/`AWS_CONFIG_FILE`). Secrets never go in larch's own
//! files. Requests are retried with backoff by the client (object_store's retry layer);
//! [`Settings::stall`] bounds how long one request may keep retrying.

use std::io;
#[cfg(feature = "s3")]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
#[cfg(feature = "s3")]
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
#[cfg(feature = "s3")]
use object_store::{BackoffConfig, ClientOptions, RetryConfig};
use serde::{Deserialize, Serialize};

/// A bucket and a prefix in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The bucket.
    pub bucket: String,
    /// The prefix ("" or without a trailing '/').
    pub prefix: String,
}

impl Location {
    /// Parses `s3://BUCKET` or `s3://BUCKET/PREFIX`.
    pub fn parse(url: &str) -> Result<Location, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{url:?} is not an s3:// address"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(format!(
                "{url}: {bucket:?} is not a bucket name (3-63 lowercase letters, digits, '-', '.')"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|part| part == "." || part == "..")
            || prefix.contains("//")
            || prefix.bytes().any(|b| b < 0x20)
        {
            return Err(format!("{url}: {prefix:?} is not a usable prefix"));
        }
        Ok(Location {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
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
    pub fn check(&self) -> Result<(), String> {
        let lease = self.lease_secs.unwrap_or(60);
        let stall = self.stall_secs.unwrap_or(30);
        if !(2..=MAX_LEASE_SECS).contains(&lease) {
            return Err(format!(
                "the lease of {lease} s is not from 2 s to {MAX_LEASE_SECS} s (a day)"
            ));
        }
        if stall == 0 || stall >= lease {
            return Err(format!(
                "the stall bound of {stall} s is not from 1 s to below the lease ({lease} s)"
            ));
        }
        Ok(())
    }
}

/// The longest lease accepted, seconds (a day): a lease is renewed every quarter of it,
/// and a node that stops makes others wait that long.
pub const MAX_LEASE_SECS: u64 = 86_400;

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

/// The entries of one section of an AWS INI file.
#[cfg(feature = "s3")]
fn ini_section(path: &std::path::Path, section: &str) -> Vec<(String, String)> {
    let Ok(ini) = ini::Ini::load_from_file(path) else {
        return Vec::new();
    };
    ini.section(Some(section))
        .map(|props| {
            props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(feature = "s3")]
fn home_file(var: &str, name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var) {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".aws").join(name))
}

#[cfg(feature = "s3")]
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(feature = "s3")]
/// A client for `location` with `settings`. Fails when no credentials are found (an
/// anonymous client would only meet "access denied" later, with less to go on).
pub fn client(location: &Location, settings: &Settings) -> io::Result<Arc<dyn ObjectStore>> {
    // HTTPS endpoints use rustls with the ring provider (the one larch's NBD TLS uses);
    // installed once per process, a second install is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let profile = settings
        .profile
        .clone()
        .or_else(|| env("AWS_PROFILE"))
        .unwrap_or_else(|| "default".into());
    let credentials = home_file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
        .map(|p| ini_section(&p, &profile))
        .unwrap_or_default();
    let config_section = if profile == "default" {
        "default".to_string()
    } else {
        format!("profile {profile}")
    };
    let config = home_file("AWS_CONFIG_FILE", "config")
        .map(|p| ini_section(&p, &config_section))
        .unwrap_or_default();
    let from_profile = |key: &str| {
        credentials
            .iter()
            .chain(config.iter())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let (key_id, secret, token) = match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) if settings.profile.is_none() => {
            (id, secret, env("AWS_SESSION_TOKEN"))
        }
        _ => match (
            from_profile("aws_access_key_id"),
            from_profile("aws_secret_access_key"),
        ) {
            (Some(id), Some(secret)) => (id, secret, from_profile("aws_session_token")),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                         or give profile {profile:?} aws_access_key_id and \
                         aws_secret_access_key in ~/.aws/credentials",
                        location.display()
                    ),
                ));
            }
        },
    };
    let region = settings
        .region
        .clone()
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| from_profile("region"))
        .unwrap_or_else(|| "us-east-1".into());
    let endpoint = settings
        .endpoint
        .clone()
        .or_else(|| env("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .or_else(|| from_profile("endpoint_url"));
    let stall = settings.stall();
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 1000,
        retry_timeout: stall,
    };
    let mut options = ClientOptions::new()
        .with_timeout(Duration::from_secs(30).min(stall))
        .with_connect_timeout(Duration::from_secs(5));
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&location.bucket)
        .with_region(region)
        .with_access_key_id(key_id)
        .with_secret_access_key(secret)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_retry(retry);
    if let Some(token) = token {
        builder = builder.with_token(token);
    }
    if let Some(endpoint) = endpoint {
        // An endpoint of the user's own (a gateway, MinIO, ...): path-style addressing,
        // and plain HTTP when the address says so.
        if endpoint.starts_with("http://") {
            options = options.with_allow_http(true);
        }
        builder = builder
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false);
    }
    let store = builder
        .with_client_options(options)
        .build()
        .map_err(|e| io::Error::other(format!("{}: {e}", location.display())))?;
    Ok(Arc::new(store))
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
        let err = huge.check().unwrap_err();
        assert!(err.contains(&u64::MAX.to_string()), "{err}");
        assert_eq!(huge.lease(), Duration::from_secs(MAX_LEASE_SECS));
        assert!(with(Some(1), None).check().is_err());
        assert!(with(Some(60), Some(0)).check().is_err());
        assert!(with(Some(60), Some(60)).check().is_err());
        assert!(with(None, Some(u64::MAX)).stall() < huge.lease());
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
}
