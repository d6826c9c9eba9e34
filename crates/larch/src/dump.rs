//! `larch dump DEVICE`: the `zdb -l` of a larch cache device.
//!
//! Prints the device header, then (`-ll`) every log block the rebuild would read, with
//! its pointer fields and whether it verified, and (`-lll`) every entry. The walk is the
//! rebuild's own ([`larch_l2::walk_log`]), so it stops where a rebuild would stop. The
//! exit status is 1 when the header claims more live log blocks or bytes than the walk
//! found (an accounting leak, as `zdb` reports it), 0 otherwise; errors exit 2.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use larch_format::{DevHeaderPhys, EntryKind, LogBlockPtrPhys, LogEntryPhys};
use larch_io::{FileDevice, FileOptions};
use larch_l2::{Geometry, StopReason, ValidBlock, read_header, validate_header, walk_log};
use serde_json::{Value, json};

/// Arguments of `larch dump`.
#[derive(clap::Args)]
pub struct DumpArgs {
    /// The cache device (or log device) or file to read.
    pub device: PathBuf,
    /// Detail: -l the header and summary (the default), -ll also each log block, -lll also
    /// each entry.
    #[arg(short = 'l', action = clap::ArgAction::Count)]
    pub level: u8,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One log block as the walk saw it.
struct BlockReport {
    ptr: LogBlockPtrPhys,
    entries: Vec<LogEntryPhys>,
    error: Option<String>,
}

/// Runs `larch dump`.
pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    let options = FileOptions {
        read_only: true,
        ..FileOptions::default()
    };
    let dev = FileDevice::open(&args.device, &options)
        .with_context(|| format!("cannot open {}", args.device.display()))?;
    let read = match read_header(&dev) {
        Ok(read) => read,
        Err(err) => {
            // Not a cache device: perhaps a log device (SLOG).
            // A log device has at least one slot that is a (valid or damaged) log header.
            if let Ok(log) = larch_zil::describe(&dev)
                && log.slots.iter().any(|slot| {
                    matches!(
                        slot,
                        larch_zil::SlotState::Valid(_) | larch_zil::SlotState::Damaged(_)
                    )
                })
            {
                if args.json {
                    println!("{}", serde_json::json!({ "log_device": log.to_string() }));
                } else {
                    print!("{log}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            return Err(anyhow::Error::new(err).context(format!(
                "{} is neither a larch cache device nor a log device",
                args.device.display()
            )));
        }
    };
    let header = read.header;
    let geometry_check = validate_header(&header, larch_io::BlockDevice::len_bytes(&dev), None);
    let mut blocks = Vec::new();
    let mut walk_summary = None;
    if let Ok(geo) = &geometry_check {
        let keep_entries = args.level >= 3;
        let mut visit = |valid: ValidBlock| {
            blocks.push(BlockReport {
                ptr: valid.ptr,
                entries: if keep_entries {
                    valid.block.entries
                } else {
                    Vec::new()
                },
                error: None,
            });
            ControlFlow::Continue(())
        };
        let end = walk_log(&dev, &header, true, &mut visit);
        if let StopReason::Invalid { ptr, error } = &end.reason {
            blocks.push(BlockReport {
                ptr: *ptr,
                entries: Vec::new(),
                error: Some(error.to_string()),
            });
        }
        walk_summary = Some((end, *geo));
    }
    let (valid_blocks, valid_bytes, stop) = match &walk_summary {
        Some((end, _)) => (
            end.blocks_valid,
            end.bytes_valid,
            describe_stop(&end.reason),
        ),
        None => (
            0,
            0,
            "not walked: the header does not fit this device".to_string(),
        ),
    };
    let invalid_blocks = blocks.iter().filter(|b| b.error.is_some()).count() as u64;
    let leak = header.log_block_count > valid_blocks || header.log_block_bytes > valid_bytes;
    let sector = u64::from(header.sector_bytes);
    let geo = walk_summary.map(|(_, geo)| geo);
    if args.json {
        let doc = json!({
            "device": args.device.display().to_string(),
            "header_slot": read.slot,
            "header": header_json(&header, geo.as_ref()),
            "other_slot_sequence": read.other.map(|h| h.sequence),
            "header_check": match &geometry_check { Ok(_) => "ok".to_string(), Err(e) => e.to_string() },
            "log_blocks": if args.level >= 2 {
                Value::Array(blocks.iter().map(|b| block_json(b, sector, geo.as_ref())).collect())
            } else {
                Value::Null
            },
            "summary": {
                "log_blocks_valid": valid_blocks,
                "log_blocks_invalid": invalid_blocks,
                "log_block_bytes_valid": valid_bytes,
                "stop": stop,
                "header_exceeds_walk": leak,
            },
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_header(&header, read.slot, read.other.as_ref(), geo.as_ref());
        match &geometry_check {
            Ok(_) => println!("header check: ok"),
            Err(e) => println!("header check: {e}"),
        }
        if args.level >= 2 {
            println!();
            println!("log blocks (newest first):");
            for block in &blocks {
                print_block(block, sector, geo.as_ref());
            }
        }
        println!();
        println!("{valid_blocks} log blocks with valid checksum, {invalid_blocks} invalid");
        println!("log_block_bytes: {valid_bytes}");
        println!("walk stopped: {stop}");
        if leak {
            println!(
                "header claims {} log blocks / {} bytes, more than the walk found",
                header.log_block_count, header.log_block_bytes
            );
        }
    }
    Ok(if leak {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn describe_stop(reason: &StopReason) -> String {
    match reason {
        StopReason::ChainEnd => "end of the log".into(),
        StopReason::EvictHand => "reached the evict hand".into(),
        StopReason::Invalid { ptr, error } => {
            format!("log block {} refused: {error}", ptr.sequence)
        }
        StopReason::EntryLimit => "entry limit".into(),
        StopReason::Cancelled => "cancelled".into(),
    }
}

fn daddr(geo: Option<&Geometry>, pos: u64) -> String {
    geo.map_or_else(|| "?".into(), |g| g.daddr(pos).to_string())
}

fn print_header(
    h: &DevHeaderPhys,
    slot: u64,
    other: Option<&DevHeaderPhys>,
    geo: Option<&Geometry>,
) {
    println!("larch cache device header (slot {slot})");
    println!("    magic: LARCHL2D");
    println!("    version: {}", h.version);
    println!("    sequence: {}", h.sequence);
    match other {
        Some(o) => println!("    other slot sequence: {}", o.sequence),
        None => println!("    other slot: never written"),
    }
    println!("    pool_guid: {:#018x}", h.pool_guid);
    println!("    device_guid: {:#018x}", h.device_guid);
    println!(
        "    flags: {:#x}{}",
        h.flags,
        if h.first_sweep() {
            " (first_sweep)"
        } else {
            ""
        }
    );
    println!("    ring_start: {}  ring_end: {}", h.ring_start, h.ring_end);
    println!("    sector_bytes: {}", h.sector_bytes);
    println!("    entries_per_block: {}", h.entries_per_block);
    println!("    chain_count: {}", h.chain_count);
    println!(
        "    write_hand_pos: {} (daddr {})",
        h.write_hand_pos,
        daddr(geo, h.write_hand_pos)
    );
    println!(
        "    evict_hand_pos: {} (daddr {})",
        h.evict_hand_pos,
        daddr(geo, h.evict_hand_pos)
    );
    println!("    log_block_count: {}", h.log_block_count);
    println!("    log_block_bytes: {}", h.log_block_bytes);
    for (i, p) in h.newest.iter().enumerate() {
        if p.is_null() {
            println!("    newest_lbp[{i}]: none");
        } else {
            println!(
                "    newest_lbp[{i}]: sequence {} daddr {}",
                p.sequence,
                daddr(geo, p.block_pos)
            );
        }
    }
}

fn print_block(b: &BlockReport, sector: u64, geo: Option<&Geometry>) {
    let p = &b.ptr;
    println!(
        "  lb[{}] daddr: {} pos: {} payload_start: {} payload_bytes: {} lsize: {} psize: {} asize: {} compression: {} checksum: {}",
        p.sequence,
        daddr(geo, p.block_pos),
        p.block_pos,
        p.payload_start_pos,
        p.payload_bytes,
        p.logical_size,
        p.physical_size,
        p.asize(sector),
        p.compression.name(),
        match &b.error {
            None => "valid".to_string(),
            Some(e) => format!("INVALID ({e})"),
        }
    );
    for (i, e) in b.entries.iter().enumerate() {
        match e.kind {
            EntryKind::Tombstone => println!(
                "      [{i}] tombstone volume: {:#x} block: {} generation: {}",
                e.volume_guid, e.block_number, e.generation
            ),
            EntryKind::Data => println!(
                "      [{i}] volume: {:#x} block: {} generation: {} daddr: {} lsize: {} psize: {} compression: {} content: {} state: {} prefetch: {} data_checksum: {:#018x}",
                e.volume_guid,
                e.block_number,
                e.generation,
                e.daddr,
                e.logical_size,
                e.physical_size,
                e.compression.name(),
                e.content.name(),
                e.arc_state.name(),
                u8::from(e.prefetch),
                e.data_checksum
            ),
        }
    }
}

fn ptr_json(p: &LogBlockPtrPhys, sector: u64, geo: Option<&Geometry>) -> Value {
    if p.is_null() {
        return Value::Null;
    }
    json!({
        "sequence": p.sequence,
        "block_pos": p.block_pos,
        "daddr": geo.map(|g| g.daddr(p.block_pos)),
        "payload_start_pos": p.payload_start_pos,
        "payload_bytes": p.payload_bytes,
        "logical_size": p.logical_size,
        "physical_size": p.physical_size,
        "asize": p.asize(sector),
        "compression": p.compression.name(),
        "checksum": format!("{:#018x}", p.checksum),
    })
}

fn header_json(h: &DevHeaderPhys, geo: Option<&Geometry>) -> Value {
    let sector = u64::from(h.sector_bytes);
    json!({
        "version": h.version,
        "sequence": h.sequence,
        "flags": h.flags,
        "first_sweep": h.first_sweep(),
        "pool_guid": h.pool_guid,
        "device_guid": h.device_guid,
        "ring_start": h.ring_start,
        "ring_end": h.ring_end,
        "sector_bytes": h.sector_bytes,
        "entries_per_block": h.entries_per_block,
        "chain_count": h.chain_count,
        "write_hand_pos": h.write_hand_pos,
        "evict_hand_pos": h.evict_hand_pos,
        "log_block_count": h.log_block_count,
        "log_block_bytes": h.log_block_bytes,
        "newest_lbp": [ptr_json(&h.newest[0], sector, geo), ptr_json(&h.newest[1], sector, geo)],
    })
}

fn block_json(b: &BlockReport, sector: u64, geo: Option<&Geometry>) -> Value {
    let entries: Vec<Value> = b
        .entries
        .iter()
        .map(|e| {
            json!({
                "kind": e.kind.name(),
                "volume_guid": e.volume_guid,
                "block_number": e.block_number,
                "generation": e.generation,
                "daddr": e.daddr,
                "logical_size": e.logical_size,
                "physical_size": e.physical_size,
                "compression": e.compression.name(),
                "content": e.content.name(),
                "arc_state": e.arc_state.name(),
                "prefetch": e.prefetch,
                "data_checksum": format!("{:#018x}", e.data_checksum),
            })
        })
        .collect();
    json!({
        "pointer": ptr_json(&b.ptr, sector, geo),
        "valid": b.error.is_none(),
        "error": b.error,
        "entries": entries,
    })
}
