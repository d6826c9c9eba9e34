//! Fuzz the TLS side of the handshake as a network client reaches it: the NBD options of
//! a server in `--tls require` mode up to an accepted STARTTLS, then the rest of the
//! input as the client's TLS records into the server's rustls connection with larch's
//! configuration (the fuzz target's own throwaway certificate). The first byte picks
//! TLS `on` or `require`. Nothing may panic; before TLS only STARTTLS and ABORT may get
//! anything but `ERR_TLS_REQD` under `require`; the parser of client certificate names
//! is fed the same bytes.
#![no_main]

use std::io::Cursor;
use std::sync::{Arc, OnceLock};

use larch_nbd::handshake::{ExportInfo, Negotiation, NegotiationLimits, Step};
use larch_nbd::{BlockSizes, Features, TlsMode};
use libfuzzer_sys::fuzz_target;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn config() -> Arc<rustls::ServerConfig> {
    static CONFIG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let cert = CertificateDer::from_pem_slice(include_bytes!("../tls/cert.pem")).unwrap();
            let key = PrivateKeyDer::from_pem_slice(include_bytes!("../tls/key.pem")).unwrap();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)
                .unwrap();
            Arc::new(config)
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode_byte, data)) = data.split_first() else {
        return;
    };
    let mode = if mode_byte & 1 == 0 {
        TlsMode::Require
    } else {
        TlsMode::On
    };
    let _ = larch_nbd::tls::certificate_names(data);
    let exports = vec![ExportInfo {
        name: "vol0".into(),
        description: "fuzz".into(),
        size_bytes: 1 << 24,
        features: Features::default(),
        block_sizes: BlockSizes::default(),
    }];
    let mut negotiation =
        Negotiation::new(&exports, NegotiationLimits::default()).with_tls(mode);
    let mut pos = 0;
    loop {
        let mut out = Vec::new();
        match negotiation.step(&data[pos..], &mut out) {
            Ok(Step::Consumed(n)) => pos += n,
            Ok(Step::StartTls { consumed }) => {
                pos += consumed;
                break;
            }
            Ok(Step::Done { .. }) => {
                assert_eq!(mode, TlsMode::On, "transmission without TLS under require");
                return;
            }
            Ok(Step::NeedMore(_)) | Ok(Step::Abort { .. }) | Err(_) => return,
        }
    }
    negotiation.tls_started();
    let mut conn = rustls::ServerConnection::new(config()).unwrap();
    let mut records = Cursor::new(&data[pos..]);
    let mut sink = Vec::new();
    loop {
        match conn.read_tls(&mut records) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if conn.process_new_packets().is_err() {
            // The alert the server would send on its way out.
            let _ = conn.write_tls(&mut sink);
            return;
        }
        while conn.wants_write() {
            sink.clear();
            if conn.write_tls(&mut sink).is_err() {
                return;
            }
        }
    }
});
