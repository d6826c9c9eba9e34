//! The options every NBD server of the CLI shares for who may connect: TLS (`--tls`,
//! certificates), the access file (`--access`), the per-client connection limit, and the
//! explicit flag that serving plaintext beyond loopback needs. They become a
//! [`larch_nbd::Security`]; the rules themselves live in `larch_nbd::access`.
//!
//! The access file (TOML) is a list of `[[allow]]` rules:
//!
//! ```toml
//! [[allow]]
//! exports = ["vol0"]          # or ["*"]
//! names = ["alice"]           # client certificate names (needs --tls and a CA)
//! addresses = ["10.0.0.0/8"]  # source addresses or blocks
//! read_only = true
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use larch_nbd::{AccessRule, AccessRules, Network, Security, TlsFiles, TlsMode, TlsSettings};
use serde::Deserialize;

/// `--tls`: nbdkit's modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsArg {
    /// No TLS (STARTTLS is refused).
    #[default]
    Off,
    /// TLS when the client asks for it; plaintext clients are served too.
    On,
    /// TLS before anything else: plaintext clients get only "TLS required".
    Require,
}

impl From<TlsArg> for TlsMode {
    fn from(arg: TlsArg) -> TlsMode {
        match arg {
            TlsArg::Off => TlsMode::Off,
            TlsArg::On => TlsMode::On,
            TlsArg::Require => TlsMode::Require,
        }
    }
}

/// Who may connect to the NBD server, and how.
#[derive(clap::Args, Clone, Debug)]
pub struct NbdSecurityArgs {
    /// TLS for NBD clients, as nbdkit's --tls: off, on (at the client's choice) or require.
    #[arg(long, value_enum, default_value_t = TlsArg::Off)]
    pub tls: TlsArg,
    /// Directory of the x509 credentials, laid out as nbdkit's and qemu-nbd's:
    /// server-cert.pem, server-key.pem and, to check client certificates, ca-cert.pem.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub tls_certificates: Option<PathBuf>,
    /// The server's certificate chain (PEM), instead of --tls-certificates.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The server's private key (PEM), with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) client certificates must chain to; with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
    /// Refuse clients without a certificate the CA verifies (nbdkit's --tls-verify-peer).
    #[arg(long)]
    pub tls_verify_peer: bool,
    /// Not supported: rustls, larch's TLS library, has no pre-shared keys (use x509
    /// certificates). Given, it is an error rather than ignored.
    #[arg(long, value_name = "FILE", hide = true)]
    pub tls_psk: Option<PathBuf>,
    /// Allow-list of exports per client certificate name and source address (TOML
    /// `[[allow]]` rules: exports, names, addresses, read_only). Without it every client
    /// may use every export.
    #[arg(long, value_name = "FILE")]
    pub access: Option<PathBuf>,
    /// NBD connections served at once from one client address.
    #[arg(long, default_value_t = larch_nbd::ServerLimits::default().max_connections_per_address, value_name = "N")]
    pub max_connections_per_client: usize,
    /// Serve plaintext NBD (or HTTP) on a non-loopback address. Without it, such an
    /// address needs --tls require; with it, larch warns and serves.
    #[arg(long)]
    pub allow_remote_plaintext: bool,
}

impl Default for NbdSecurityArgs {
    /// What `larch` with no arguments runs: no TLS, no access file, loopback only.
    fn default() -> NbdSecurityArgs {
        NbdSecurityArgs {
            tls: TlsArg::Off,
            tls_certificates: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_verify_peer: false,
            tls_psk: None,
            access: None,
            max_connections_per_client: larch_nbd::ServerLimits::default()
                .max_connections_per_address,
            allow_remote_plaintext: false,
        }
    }
}

/// The `[[allow]]` rules of an access file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccessFile {
    #[serde(default)]
    allow: Vec<AllowRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowRule {
    exports: Vec<String>,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    read_only: bool,
}

impl NbdSecurityArgs {
    /// The TLS credentials' files, if any were given.
    fn tls_files(&self) -> Option<TlsFiles> {
        if let Some(dir) = &self.tls_certificates {
            return Some(TlsFiles::in_directory(dir, self.tls_verify_peer));
        }
        let (cert, key) = (self.tls_cert.clone()?, self.tls_key.clone()?);
        Some(TlsFiles {
            cert,
            key,
            ca: self.tls_ca.clone(),
            verify_peer: self.tls_verify_peer,
        })
    }

    /// Checks the options and loads the credentials and the access file.
    pub fn security(&self) -> anyhow::Result<Security> {
        if let Some(psk) = &self.tls_psk {
            bail!(
                "--tls-psk {}: pre-shared keys are not supported (larch's TLS library, rustls, \
                 has none); use x509 certificates with --tls-certificates",
                psk.display()
            );
        }
        let files = self.tls_files();
        let tls = match (self.tls, files) {
            (TlsArg::Off, None) => {
                if self.tls_verify_peer {
                    bail!("--tls-verify-peer needs --tls on or --tls require");
                }
                None
            }
            (TlsArg::Off, Some(_)) => {
                bail!("TLS credentials were given but --tls is off: add --tls on or --tls require")
            }
            (mode, None) => bail!(
                "--tls {}: needs the server's certificate: --tls-certificates DIR, or \
                 --tls-cert FILE --tls-key FILE",
                if mode == TlsArg::On { "on" } else { "require" }
            ),
            (mode, Some(files)) => Some(
                TlsSettings::load(mode.into(), &files)
                    .map_err(|e| anyhow::anyhow!("TLS credentials: {e}"))?,
            ),
        };
        let access = match &self.access {
            None => AccessRules::open(),
            Some(path) => {
                let rules = read_access_file(path)?;
                if tls.is_none()
                    && let Some(i) = rules.iter().position(|r| !r.names.is_empty())
                {
                    bail!(
                        "{}: rule {} names client certificates, which only TLS shows: add --tls",
                        path.display(),
                        i + 1
                    );
                }
                if rules.iter().any(|r| !r.names.is_empty())
                    && tls.as_ref().is_some_and(|t| !t.client_certificates)
                {
                    bail!(
                        "{}: rules name client certificates, but no CA to verify them was given \
                         (ca-cert.pem in --tls-certificates, or --tls-ca)",
                        path.display()
                    );
                }
                AccessRules::allow_list(rules)
            }
        };
        if self.max_connections_per_client == 0 {
            bail!("--max-connections-per-client must be at least 1");
        }
        Ok(Security { tls, access })
    }

    /// Whether an NBD server may listen on `addr` (see `larch_daemon::serve::check_bind`).
    pub fn check_bind(&self, addr: SocketAddr) -> anyhow::Result<()> {
        larch_daemon::serve::check_bind(
            "NBD",
            addr,
            self.tls == TlsArg::Require,
            self.allow_remote_plaintext,
        )
    }

    /// The HTTPS configuration of `--http-remote`: the NBD server's certificate, no client
    /// certificates (browsers do not send them; the token authenticates).
    pub fn https_config(&self) -> anyhow::Result<std::sync::Arc<larch_nbd::tls::ServerConfig>> {
        let mut files = self
            .tls_files()
            .context("HTTPS needs the NBD server's certificate (--tls-certificates)")?;
        files.ca = None;
        files.verify_peer = false;
        larch_nbd::tls::server_config(&files).map_err(|e| anyhow::anyhow!("TLS credentials: {e}"))
    }
}

/// The rules of an access file; errors name the file (and the line, for syntax).
pub fn read_access_file(path: &Path) -> anyhow::Result<Vec<AccessRule>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the access file {}", path.display()))?;
    let file: AccessFile =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut rules = Vec::with_capacity(file.allow.len());
    for (i, rule) in file.allow.into_iter().enumerate() {
        let at = || format!("{}: rule {}", path.display(), i + 1);
        if rule.exports.is_empty() {
            bail!(
                "{}: exports is empty (name exports, or \"*\" for all)",
                at()
            );
        }
        let networks = rule
            .addresses
            .iter()
            .map(|a| a.parse::<Network>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("{}: addresses: {e}", at()))?;
        rules.push(AccessRule {
            exports: rule.exports,
            names: rule.names,
            networks,
            read_only: rule.read_only,
        });
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn access_files_parse_and_bad_ones_name_the_problem() {
        let dir = tempdir();
        let good = write(
            &dir,
            "good.toml",
            "[[allow]]\nexports = [\"vol0\"]\naddresses = [\"10.0.0.0/8\", \"::1\"]\nread_only = true\n\n[[allow]]\nexports = [\"*\"]\nnames = [\"alice\"]\n",
        );
        let rules = read_access_file(&good).unwrap();
        assert_eq!(rules.len(), 2);
        assert!(rules[0].read_only);
        assert_eq!(rules[1].names, vec!["alice".to_string()]);
        let syntax = write(&dir, "syntax.toml", "[[allow]]\nexports = [\"vol0\"\n");
        let err = read_access_file(&syntax).unwrap_err().to_string();
        assert!(err.contains("syntax.toml") && err.contains("line"), "{err}");
        let unknown = write(
            &dir,
            "unknown.toml",
            "[[allow]]\nexports = [\"v\"]\nusers = [\"x\"]\n",
        );
        let err = read_access_file(&unknown).unwrap_err().to_string();
        assert!(err.contains("users"), "{err}");
        let net = write(
            &dir,
            "net.toml",
            "[[allow]]\nexports = [\"v\"]\naddresses = [\"10.0.0.0/40\"]\n",
        );
        let err = read_access_file(&net).unwrap_err().to_string();
        assert!(err.contains("rule 1") && err.contains("prefix"), "{err}");
        let empty = write(&dir, "empty.toml", "[[allow]]\nexports = []\n");
        assert!(read_access_file(&empty).is_err());
        let missing = dir.join("missing.toml");
        let err = format!("{:#}", read_access_file(&missing).unwrap_err());
        assert!(err.contains("missing.toml"), "{err}");
    }

    #[test]
    fn tls_options_must_fit_together() {
        let args = |tls, dir: Option<&str>| NbdSecurityArgs {
            tls,
            tls_certificates: dir.map(PathBuf::from),
            max_connections_per_client: 4,
            ..NbdSecurityArgs::default()
        };
        assert!(args(TlsArg::Off, None).security().unwrap().tls.is_none());
        let err = args(TlsArg::Require, None)
            .security()
            .unwrap_err()
            .to_string();
        assert!(err.contains("--tls-certificates"), "{err}");
        let err = args(TlsArg::Off, Some("/x"))
            .security()
            .unwrap_err()
            .to_string();
        assert!(err.contains("--tls is off"), "{err}");
        let err = args(TlsArg::On, Some("/nonexistent-dir"))
            .security()
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent-dir/server-cert.pem"), "{err}");
        let psk = NbdSecurityArgs {
            tls_psk: Some(PathBuf::from("/k.psk")),
            ..args(TlsArg::On, None)
        };
        let err = psk.security().unwrap_err().to_string();
        assert!(err.contains("pre-shared keys are not supported"), "{err}");
    }

    #[test]
    fn plaintext_beyond_loopback_needs_the_flag() {
        let plain = NbdSecurityArgs::default();
        assert!(plain.check_bind("127.0.0.1:10809".parse().unwrap()).is_ok());
        assert!(plain.check_bind("[::1]:10809".parse().unwrap()).is_ok());
        let err = plain
            .check_bind("0.0.0.0:10809".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("--allow-remote-plaintext"), "{err}");
        let allowed = NbdSecurityArgs {
            allow_remote_plaintext: true,
            ..NbdSecurityArgs::default()
        };
        assert!(allowed.check_bind("0.0.0.0:10809".parse().unwrap()).is_ok());
        let tls = NbdSecurityArgs {
            tls: TlsArg::Require,
            ..NbdSecurityArgs::default()
        };
        assert!(tls.check_bind("192.0.2.1:10809".parse().unwrap()).is_ok());
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "larch-nbd-security-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
