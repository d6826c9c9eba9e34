//! TLS for NBD: the server's certificate and key, the CA client certificates are checked
//! against, and the names a verified client certificate carries.
//!
//! The TLS itself is rustls (pure Rust, no C library in the address space of a process
//! that parses what the network sends, and fuzzable in-process) with the `ring` crypto
//! provider. rustls has no external pre-shared keys (nbdkit's `--tls-psk`), so larch
//! offers x509 only; OpenSSL or GnuTLS would offer PSK, at the price of a C TLS stack.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use thiserror::Error;

pub use rustls::ServerConfig;

use crate::handshake::TlsMode;

/// The file names looked for in a certificate directory, as nbdkit and qemu-nbd name them.
pub const CA_CERT_FILE: &str = "ca-cert.pem";
/// See [`CA_CERT_FILE`].
pub const SERVER_CERT_FILE: &str = "server-cert.pem";
/// See [`CA_CERT_FILE`].
pub const SERVER_KEY_FILE: &str = "server-key.pem";

/// Where the server's credentials are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) client certificates are verified against; without it no
    /// client certificate is asked for.
    pub ca: Option<PathBuf>,
    /// Refuse clients without a certificate the CA verifies (nbdkit's
    /// `--tls-verify-peer`). Needs `ca`.
    pub verify_peer: bool,
}

impl TlsFiles {
    /// The files of a directory laid out as nbdkit's and qemu-nbd's:
    /// `server-cert.pem`, `server-key.pem`, and `ca-cert.pem` when it exists.
    pub fn in_directory(dir: &Path, verify_peer: bool) -> TlsFiles {
        let ca = dir.join(CA_CERT_FILE);
        TlsFiles {
            cert: dir.join(SERVER_CERT_FILE),
            key: dir.join(SERVER_KEY_FILE),
            ca: (ca.exists() || verify_peer).then_some(ca),
            verify_peer,
        }
    }
}

/// Why the credentials could not be loaded; every message names the file.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not what it should be.
    #[error("{path}: {reason}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `verify_peer` without a CA file.
    #[error("verifying client certificates needs a CA certificate file ({CA_CERT_FILE})")]
    VerifyWithoutCa,
    /// The settings do not fit together (for example a key that is not the certificate's).
    #[error("{0}")]
    Config(String),
}

/// TLS as a server runs it.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// [`TlsMode::On`] or [`TlsMode::Require`] (with [`TlsMode::Off`] no TLS is offered).
    pub mode: TlsMode,
    /// The rustls configuration.
    pub config: Arc<ServerConfig>,
    /// Whether client certificates are asked for (a CA was given).
    pub client_certificates: bool,
}

impl TlsSettings {
    /// Loads `files` for a server in `mode`.
    pub fn load(mode: TlsMode, files: &TlsFiles) -> Result<TlsSettings, TlsError> {
        let config = server_config(files)?;
        Ok(TlsSettings {
            mode,
            config,
            client_certificates: files.ca.is_some(),
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn bad(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::Bad {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The certificates of a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(bad(
            path,
            "no certificate in it (want -----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// Builds the rustls configuration of `files`.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&files.cert)?;
    let key_pem = read(&files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        let text = String::from_utf8_lossy(&key_pem);
        if text.contains("ENCRYPTED") {
            bad(
                &files.key,
                "the key is encrypted, and larch reads no passphrase: store it decrypted \
                 with owner-only permissions (openssl pkey -in KEY -out PLAIN-KEY)",
            )
        } else {
            bad(
                &files.key,
                format!("no private key in it (want PKCS#8, RSA or EC PEM): {e}"),
            )
        }
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.ca {
        None if files.verify_peer => return Err(TlsError::VerifyWithoutCa),
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| bad(ca, format!("not a usable CA certificate: {e}")))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            let verifier = if files.verify_peer {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|e| bad(ca, format!("cannot verify clients with it: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    // rustls checks the key against the certificate only when it can say; a mismatch it
    // detects is named here rather than at the first handshake.
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| bad(&files.key, format!("unusable private key: {e}")))?;
    let certified = rustls::sign::CertifiedKey::new(chain.clone(), signing_key);
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        certified.keys_match()
    {
        return Err(TlsError::Config(format!(
            "{} is not the key of the certificate in {}",
            files.key.display(),
            files.cert.display()
        )));
    }
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(format!("{}: {e}", files.cert.display())))?;
    Ok(Arc::new(config))
}

/// The names a client certificate carries (see
/// [`ClientIdentity::names`](crate::access::ClientIdentity::names)); empty if it does not
/// parse (it was verified already, so that does not happen in practice).
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for cn in cert.subject().iter_common_name() {
        if let Ok(cn) = cn.as_str() {
            names.push(cn.to_string());
        }
    }
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) | GeneralName::RFC822Name(n) => names.push(n.to_string()),
                _ => {}
            }
        }
    }
    names.push(cert.subject().to_string());
    names.dedup();
    names
}
