//! Negotiation tests: byte-exact replies for every option and the hard-disconnect cases.

use proptest::prelude::*;

use super::*;

fn exports() -> Vec<ExportInfo> {
    vec![
        ExportInfo {
            name: "disk".into(),
            description: "the disk".into(),
            size_bytes: 1 << 20,
            features: Features::default(),
            block_sizes: BlockSizes::default(),
        },
        ExportInfo {
            name: "ro".into(),
            description: String::new(),
            size_bytes: 4096,
            features: Features {
                read_only: true,
                block_status: false,
                ..Features::default()
            },
            block_sizes: BlockSizes::default(),
        },
    ]
}

fn option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn go_payload(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut v = (name.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        v.extend_from_slice(&i.to_be_bytes());
    }
    v
}

fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut v = (name.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        v.extend_from_slice(&(q.len() as u32).to_be_bytes());
        v.extend_from_slice(q.as_bytes());
    }
    v
}

/// A parsed option reply: (option, type, data).
type OptionReply = (u32, u32, Vec<u8>);

fn parse_replies(mut out: &[u8]) -> Vec<OptionReply> {
    let mut replies = Vec::new();
    while !out.is_empty() {
        assert!(out.len() >= 20, "truncated reply: {out:?}");
        assert_eq!(be_u64(&out[0..8]), OPTION_REPLY_MAGIC);
        let len = be_u32(&out[16..20]) as usize;
        replies.push((
            be_u32(&out[8..12]),
            be_u32(&out[12..16]),
            out[20..20 + len].to_vec(),
        ));
        out = &out[20 + len..];
    }
    replies
}

/// Feeds `input` through a negotiation; returns the outcome of the last step and the
/// bytes written.
fn run(exports: &[ExportInfo], input: &[u8]) -> (Result<Step, NegotiationError>, Vec<u8>) {
    let mut n = Negotiation::new(exports, NegotiationLimits::default());
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        match n.step(&input[pos..], &mut out) {
            Ok(Step::Consumed(c)) => pos += c,
            other => return (other, out),
        }
    }
}

fn session(opts: &[Vec<u8>]) -> Vec<u8> {
    let mut v = (client_flag::FIXED_NEWSTYLE | client_flag::NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    for o in opts {
        v.extend_from_slice(o);
    }
    v
}

#[test]
fn greeting_is_the_spec_bytes() {
    let g = greeting();
    assert_eq!(&g[0..8], b"NBDMAGIC");
    assert_eq!(&g[8..16], b"IHAVEOPT");
    assert_eq!(&g[16..18], &[0, 3]);
}

#[test]
fn unknown_client_flags_disconnect() {
    let (r, out) = run(&exports(), &0x7u32.to_be_bytes());
    assert_eq!(r, Err(NegotiationError::UnknownClientFlags(7)));
    assert!(out.is_empty());
    let (r, _) = run(&exports(), &0u32.to_be_bytes());
    assert_eq!(r, Err(NegotiationError::NotFixedNewstyle(0)));
}

#[test]
fn partial_input_asks_for_more() {
    let ex = exports();
    let mut n = Negotiation::new(&ex, NegotiationLimits::default());
    let mut out = Vec::new();
    assert_eq!(n.step(&[0, 0], &mut out), Ok(Step::NeedMore(4)));
    assert_eq!(n.step(&[0, 0, 0, 1], &mut out), Ok(Step::Consumed(4)));
    let go = option(opt::GO, &go_payload("disk", &[]));
    assert_eq!(n.step(&go[..10], &mut out), Ok(Step::NeedMore(16)));
    assert_eq!(n.step(&go[..20], &mut out), Ok(Step::NeedMore(go.len())));
    assert!(out.is_empty());
}

#[test]
fn go_replies_export_info_block_size_and_ack() {
    let input = session(&[
        option(opt::STRUCTURED_REPLY, &[]),
        option(
            opt::GO,
            &go_payload("disk", &[info::NAME, info::DESCRIPTION]),
        ),
    ]);
    let (r, out) = run(&exports(), &input);
    let Ok(Step::Done { negotiated, .. }) = r else {
        panic!("expected Done, got {r:?}");
    };
    assert_eq!(negotiated.export_index, 0);
    assert!(negotiated.structured_replies);
    assert!(!negotiated.base_allocation);
    assert_eq!(negotiated.transmission_flags, 0x0ded);
    let replies = parse_replies(&out);
    assert_eq!(replies[0], (opt::STRUCTURED_REPLY, rep::ACK, vec![]));
    let export_info = &replies[1];
    assert_eq!((export_info.0, export_info.1), (opt::GO, rep::INFO));
    assert_eq!(&export_info.2[0..2], &[0, 0]);
    assert_eq!(be_u64(&export_info.2[2..10]), 1 << 20);
    assert_eq!(&export_info.2[10..12], &0x0dedu16.to_be_bytes());
    assert_eq!(replies[2].2, [&[0u8, 1][..], b"disk"].concat());
    assert_eq!(replies[3].2, [&[0u8, 2][..], b"the disk"].concat());
    assert_eq!(replies[4].2.len(), 14, "block size info");
    assert_eq!(be_u32(&replies[4].2[10..14]), 32 << 20);
    assert_eq!(replies[5], (opt::GO, rep::ACK, vec![]));
    assert_eq!(replies.len(), 6);
}

#[test]
fn info_and_go_agree() {
    let info_in = session(&[option(opt::INFO, &go_payload("ro", &[info::BLOCK_SIZE]))]);
    let mut n_exports = exports();
    n_exports.truncate(2);
    let mut n = Negotiation::new(&n_exports, NegotiationLimits::default());
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < info_in.len() {
        match n.step(&info_in[pos..], &mut out).unwrap() {
            Step::Consumed(c) => pos += c,
            s => panic!("unexpected {s:?}"),
        }
    }
    let info_replies = parse_replies(&out);
    out.clear();
    let go = option(opt::GO, &go_payload("ro", &[info::BLOCK_SIZE]));
    let Step::Done { negotiated, .. } = n.step(&go, &mut out).unwrap() else {
        panic!("GO did not finish");
    };
    let go_replies = parse_replies(&out);
    assert_eq!(info_replies.len(), go_replies.len());
    for (i, g) in info_replies.iter().zip(&go_replies) {
        assert_eq!((i.1, &i.2), (g.1, &g.2));
    }
    assert_eq!(negotiated.export_index, 1);
    assert_ne!(negotiated.transmission_flags & tx_flag::READ_ONLY, 0);
    assert_eq!(negotiated.transmission_flags & tx_flag::SEND_TRIM, 0);
}

#[test]
fn go_unknown_export_is_an_error_and_negotiation_continues() {
    let input = session(&[
        option(opt::GO, &go_payload("nope", &[])),
        option(opt::GO, &go_payload("", &[])),
    ]);
    let (r, out) = run(&exports(), &input);
    assert!(matches!(
        r,
        Ok(Step::Done {
            negotiated: Negotiated {
                export_index: 0,
                ..
            },
            ..
        })
    ));
    let replies = parse_replies(&out);
    assert_eq!(replies[0].1, rep::ERR_UNKNOWN);
}

#[test]
fn unknown_option_is_unsupported_and_its_payload_skipped() {
    let input = session(&[option(0xdead, &[7u8; 100]), option(opt::ABORT, &[])]);
    let (r, out) = run(&exports(), &input);
    assert_eq!(r, Ok(Step::Abort { consumed: 16 }));
    let replies = parse_replies(&out);
    assert_eq!((replies[0].0, replies[0].1), (0xdead, rep::ERR_UNSUP));
    assert_eq!(replies[1], (opt::ABORT, rep::ACK, vec![]));
}

#[test]
fn starttls_is_refused_by_policy() {
    let input = session(&[option(opt::STARTTLS, &[]), option(opt::ABORT, &[])]);
    let (_, out) = run(&exports(), &input);
    assert_eq!(parse_replies(&out)[0].1, rep::ERR_POLICY);
}

#[test]
fn list_names_every_export() {
    let input = session(&[
        option(opt::LIST, &[1]),
        option(opt::LIST, &[]),
        option(opt::ABORT, &[]),
    ]);
    let (_, out) = run(&exports(), &input);
    let replies = parse_replies(&out);
    assert_eq!(replies[0].1, rep::ERR_INVALID);
    assert_eq!(replies[1].1, rep::SERVER);
    assert_eq!(
        replies[1].2,
        [&4u32.to_be_bytes()[..], b"disk", b"the disk"].concat()
    );
    assert_eq!(replies[2].2, [&2u32.to_be_bytes()[..], b"ro"].concat());
    assert_eq!(replies[3], (opt::LIST, rep::ACK, vec![]));
}

#[test]
fn meta_context_needs_structured_replies() {
    let set = option(
        opt::SET_META_CONTEXT,
        &meta_payload("disk", &[BASE_ALLOCATION]),
    );
    let input = session(&[set.clone(), option(opt::GO, &go_payload("disk", &[]))]);
    let (r, out) = run(&exports(), &input);
    assert_eq!(parse_replies(&out)[0].1, rep::ERR_INVALID);
    let Ok(Step::Done { negotiated, .. }) = r else {
        panic!("{r:?}")
    };
    assert!(!negotiated.base_allocation);
    assert_eq!(negotiated.transmission_flags & tx_flag::SEND_DF, 0);
}

#[test]
fn set_meta_context_selects_base_allocation_for_the_same_export_only() {
    let set = option(
        opt::SET_META_CONTEXT,
        &meta_payload(
            "disk",
            &["qemu:dirty-bitmap:x", BASE_ALLOCATION, "base:nothing"],
        ),
    );
    let sr = option(opt::STRUCTURED_REPLY, &[]);
    let input = session(&[
        sr.clone(),
        set.clone(),
        option(opt::GO, &go_payload("disk", &[])),
    ]);
    let (r, out) = run(&exports(), &input);
    let replies = parse_replies(&out);
    assert_eq!(replies[1].1, rep::META_CONTEXT);
    assert_eq!(
        replies[1].2,
        [
            &BASE_ALLOCATION_ID.to_be_bytes()[..],
            BASE_ALLOCATION.as_bytes()
        ]
        .concat()
    );
    assert_eq!(replies[2].1, rep::ACK);
    let Ok(Step::Done { negotiated, .. }) = r else {
        panic!("{r:?}")
    };
    assert!(negotiated.base_allocation);

    // GO for a different name than the one the contexts were set for: no block status.
    let input = session(&[sr, set, option(opt::GO, &go_payload("", &[]))]);
    let (r, _) = run(&exports(), &input);
    let Ok(Step::Done { negotiated, .. }) = r else {
        panic!("{r:?}")
    };
    assert!(!negotiated.base_allocation);
}

#[test]
fn list_meta_context_wildcards() {
    let sr = option(opt::STRUCTURED_REPLY, &[]);
    for queries in [&[][..], &["base:"][..], &[BASE_ALLOCATION][..]] {
        let input = session(&[
            sr.clone(),
            option(opt::LIST_META_CONTEXT, &meta_payload("disk", queries)),
            option(opt::ABORT, &[]),
        ]);
        let (_, out) = run(&exports(), &input);
        let replies = parse_replies(&out);
        assert_eq!(replies[1].1, rep::META_CONTEXT, "queries {queries:?}");
        assert_eq!(&replies[1].2[4..], BASE_ALLOCATION.as_bytes());
    }
    // The read-only export has no block status: nothing is listed.
    let input = session(&[
        sr,
        option(opt::LIST_META_CONTEXT, &meta_payload("ro", &[])),
        option(opt::ABORT, &[]),
    ]);
    let (_, out) = run(&exports(), &input);
    assert_eq!(parse_replies(&out)[1].1, rep::ACK);
}

#[test]
fn export_name_with_and_without_zeroes() {
    for (flags, expect_len) in [(1u32, 134usize), (3, 10)] {
        let mut input = flags.to_be_bytes().to_vec();
        input.extend_from_slice(&option(opt::EXPORT_NAME, b"disk"));
        let (r, out) = run(&exports(), &input);
        assert!(matches!(r, Ok(Step::Done { .. })), "{r:?}");
        assert_eq!(out.len(), expect_len);
        assert_eq!(be_u64(&out[0..8]), 1 << 20);
    }
    let input = session(&[option(opt::EXPORT_NAME, b"missing")]);
    let (r, out) = run(&exports(), &input);
    assert_eq!(r, Err(NegotiationError::UnknownExport("missing".into())));
    assert!(out.is_empty());
}

#[test]
fn oversized_option_and_bad_magic_disconnect() {
    let mut input = session(&[]);
    input.extend_from_slice(&IHAVEOPT.to_be_bytes());
    input.extend_from_slice(&opt::LIST.to_be_bytes());
    input.extend_from_slice(&(1u32 << 30).to_be_bytes());
    let (r, _) = run(&exports(), &input);
    assert!(matches!(r, Err(NegotiationError::OptionTooLong { .. })));
    let mut input = session(&[]);
    input.extend_from_slice(&[0xffu8; 16]);
    let (r, _) = run(&exports(), &input);
    assert!(matches!(r, Err(NegotiationError::BadOptionMagic(_))));
}

#[test]
fn malformed_go_payloads_are_invalid() {
    let mut truncated = go_payload("disk", &[1, 2]);
    truncated.pop();
    let mut long_name = go_payload("disk", &[]);
    long_name[0..4].copy_from_slice(&5000u32.to_be_bytes());
    let mut trailing = go_payload("disk", &[]);
    trailing.push(0);
    for payload in [truncated, long_name, trailing, vec![], vec![0, 0, 0]] {
        let input = session(&[option(opt::GO, &payload), option(opt::ABORT, &[])]);
        let (r, out) = run(&exports(), &input);
        assert!(matches!(r, Ok(Step::Abort { .. })), "{r:?}");
        assert_eq!(
            parse_replies(&out)[0].1,
            rep::ERR_INVALID,
            "payload {payload:?}"
        );
    }
}

#[test]
fn shutdown_refuses_options() {
    let ex = exports();
    let mut n = Negotiation::new(&ex, NegotiationLimits::default());
    let mut out = Vec::new();
    n.step(&1u32.to_be_bytes(), &mut out).unwrap();
    n.set_shutting_down();
    let go = option(opt::GO, &go_payload("disk", &[]));
    assert_eq!(n.step(&go, &mut out), Ok(Step::Consumed(go.len())));
    assert_eq!(parse_replies(&out)[0].1, rep::ERR_SHUTDOWN);
    // EXPORT_NAME has no error reply: the negotiation fails and the connection closes.
    out.clear();
    let name = option(opt::EXPORT_NAME, b"disk");
    assert_eq!(n.step(&name, &mut out), Err(NegotiationError::ShuttingDown));
    assert!(out.is_empty());
}

proptest! {
    /// Any byte stream: no panic, every step consumes within the input, and whatever is
    /// written parses as option replies (or the EXPORT_NAME answer that ends it).
    #[test]
    fn arbitrary_streams_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..512),
        flags in 0u32..4,
        mode in prop_oneof![Just(TlsMode::Off), Just(TlsMode::On), Just(TlsMode::Require)],
    ) {
        let mut input = flags.to_be_bytes().to_vec();
        input.extend_from_slice(&tail);
        let ex = exports();
        let mut n = Negotiation::new(&ex, NegotiationLimits { max_option_bytes: 1024 })
            .with_tls(mode);
        let mut out = Vec::new();
        let mut pos = 0;
        loop {
            match n.step(&input[pos..], &mut out) {
                Ok(Step::Consumed(c)) => {
                    prop_assert!(c > 0 && pos + c <= input.len());
                    pos += c;
                }
                Ok(Step::StartTls { consumed }) => {
                    prop_assert!(mode != TlsMode::Off && pos + consumed <= input.len());
                    pos += consumed;
                    n.tls_started();
                }
                Ok(Step::NeedMore(total)) => {
                    prop_assert!(total > input.len() - pos);
                    break;
                }
                Ok(Step::Done { consumed, .. }) | Ok(Step::Abort { consumed }) => {
                    prop_assert!(pos + consumed <= input.len());
                    break;
                }
                Err(_) => break,
            }
        }
    }

    /// Well-formed option sequences always end in GO with the right export.
    #[test]
    fn valid_sessions_reach_transmission(
        pre in proptest::collection::vec(0usize..5, 0..6),
        which in 0usize..2,
    ) {
        let sr = option(opt::STRUCTURED_REPLY, &[]);
        let mut opts: Vec<Vec<u8>> = vec![sr];
        for p in pre {
            opts.push(match p {
                0 => option(opt::LIST, &[]),
                1 => option(opt::INFO, &go_payload("disk", &[info::NAME])),
                2 => option(0x4000, &[1, 2, 3]),
                3 => option(opt::LIST_META_CONTEXT, &meta_payload("disk", &[])),
                _ => option(opt::STARTTLS, &[]),
            });
        }
        let name = ["disk", "ro"][which];
        opts.push(option(opt::GO, &go_payload(name, &[])));
        let (r, _) = run(&exports(), &session(&opts));
        let Ok(Step::Done { negotiated, .. }) = r else { panic!("{r:?}") };
        prop_assert_eq!(negotiated.export_index, which);
    }
}

/// Runs `input` through a negotiation in TLS `mode` with `access` (if given), starting TLS
/// when asked, until the first step that is neither `Consumed` nor `StartTls`; returns
/// every step's outcome and the bytes written.
fn run_with(
    input: &[u8],
    mode: TlsMode,
    access: Option<Vec<Access>>,
) -> (Vec<Result<Step, NegotiationError>>, Vec<u8>) {
    let exports = exports();
    let mut n = Negotiation::new(&exports, NegotiationLimits::default()).with_tls(mode);
    if let Some(access) = access {
        n.set_access(access);
    }
    let mut out = Vec::new();
    let mut steps = Vec::new();
    let mut pos = 0;
    loop {
        let step = n.step(&input[pos..], &mut out);
        steps.push(step.clone());
        match step {
            Ok(Step::Consumed(c)) => pos += c,
            Ok(Step::StartTls { consumed }) => {
                pos += consumed;
                n.tls_started();
            }
            _ => return (steps, out),
        }
    }
}

#[test]
fn require_answers_tls_reqd_until_starttls() {
    let input = session(&[
        option(opt::LIST, &[]),
        option(opt::STRUCTURED_REPLY, &[]),
        option(opt::GO, &go_payload("disk", &[])),
        option(opt::STARTTLS, &[]),
        option(opt::GO, &go_payload("disk", &[])),
    ]);
    let (steps, out) = run_with(&input, TlsMode::Require, None);
    let replies = parse_replies(&out);
    let types: Vec<u32> = replies.iter().map(|r| r.1).collect();
    assert_eq!(
        &types[..4],
        &[
            rep::ERR_TLS_REQD,
            rep::ERR_TLS_REQD,
            rep::ERR_TLS_REQD,
            rep::ACK
        ]
    );
    assert_eq!(replies[3].0, opt::STARTTLS);
    let last = steps.last().unwrap();
    assert!(matches!(last, Ok(Step::Done { .. })), "{last:?}");
}

#[test]
fn export_name_without_tls_under_require_disconnects() {
    let input = session(&[option(opt::EXPORT_NAME, b"disk")]);
    let (steps, out) = run_with(&input, TlsMode::Require, None);
    assert_eq!(steps.last().unwrap(), &Err(NegotiationError::TlsRequired));
    assert!(out.is_empty());
}

#[test]
fn starttls_twice_or_with_payload_is_invalid_and_off_is_policy() {
    let input = session(&[
        option(opt::STARTTLS, b"x"),
        option(opt::STARTTLS, &[]),
        option(opt::STARTTLS, &[]),
        option(opt::ABORT, &[]),
    ]);
    let (_, out) = run_with(&input, TlsMode::On, None);
    let types: Vec<u32> = parse_replies(&out).iter().map(|r| r.1).collect();
    assert_eq!(
        types,
        vec![rep::ERR_INVALID, rep::ACK, rep::ERR_INVALID, rep::ACK]
    );
    let (_, out) = run_with(&input, TlsMode::Off, None);
    let types: Vec<u32> = parse_replies(&out).iter().map(|r| r.1).collect();
    assert_eq!(
        types,
        vec![rep::ERR_INVALID, rep::ERR_POLICY, rep::ERR_POLICY, rep::ACK]
    );
}

#[test]
fn starttls_forgets_what_was_negotiated_in_plaintext() {
    let input = session(&[
        option(opt::STRUCTURED_REPLY, &[]),
        option(
            opt::SET_META_CONTEXT,
            &meta_payload("disk", &["base:allocation"]),
        ),
        option(opt::STARTTLS, &[]),
        option(opt::GO, &go_payload("disk", &[])),
    ]);
    let (steps, _) = run_with(&input, TlsMode::On, None);
    let Some(Ok(Step::Done { negotiated, .. })) = steps.last() else {
        panic!("{steps:?}");
    };
    assert!(!negotiated.structured_replies);
    assert!(!negotiated.base_allocation);
}

#[test]
fn access_hides_denied_exports_and_makes_read_only_ones_read_only() {
    let input = session(&[
        option(opt::LIST, &[]),
        option(opt::INFO, &go_payload("ro", &[])),
        option(opt::GO, &go_payload("disk", &[])),
    ]);
    let access = vec![Access::ReadOnly, Access::Denied];
    let (steps, out) = run_with(&input, TlsMode::Off, Some(access));
    let replies = parse_replies(&out);
    // LIST shows "disk" only, then its ACK.
    assert_eq!(replies[0].1, rep::SERVER);
    assert_eq!(&replies[0].2[4..8], b"disk");
    assert_eq!(replies[1].1, rep::ACK);
    assert_eq!(replies[2].1, rep::ERR_POLICY);
    let Some(Ok(Step::Done { negotiated, .. })) = steps.last() else {
        panic!("{steps:?}");
    };
    assert!(negotiated.read_only);
    assert_ne!(negotiated.transmission_flags & tx_flag::READ_ONLY, 0);
    assert_eq!(negotiated.transmission_flags & tx_flag::SEND_TRIM, 0);
}

#[test]
fn needs_tls_answers_tls_reqd_only_while_tls_is_offered_and_off() {
    let go = session(&[option(opt::GO, &go_payload("disk", &[]))]);
    let needs = || Some(vec![Access::NeedsTls, Access::NeedsTls]);
    let (_, out) = run_with(&go, TlsMode::On, needs());
    assert_eq!(parse_replies(&out)[0].1, rep::ERR_TLS_REQD);
    // NOTLS never sends ERR_TLS_REQD.
    let (_, out) = run_with(&go, TlsMode::Off, needs());
    assert_eq!(parse_replies(&out)[0].1, rep::ERR_POLICY);
    let export_name = session(&[option(opt::EXPORT_NAME, b"disk")]);
    let (steps, _) = run_with(&export_name, TlsMode::On, needs());
    assert_eq!(steps.last().unwrap(), &Err(NegotiationError::TlsRequired));
    let denied = Some(vec![Access::Denied, Access::Denied]);
    let (steps, _) = run_with(&export_name, TlsMode::Off, denied);
    assert_eq!(
        steps.last().unwrap(),
        &Err(NegotiationError::ExportDenied("disk".into()))
    );
}
