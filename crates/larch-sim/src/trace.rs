//! Block trace readers. Every reader streams: it holds one line or one record at a time, so a
//! trace larger than RAM replays. Compressed input (zstd, gzip) is detected by its magic bytes.
//!
//! Formats:
//! - `text`: one block number per line (LIRS traces; `*` lines, blank lines and `#` comments
//!   are skipped).
//! - `lis`: the ARC paper's traces: `start count x y` = `count` requests for consecutive
//!   512-byte pages from `start`.
//! - `csv`: block I/O records. With a header row, columns are found by name (time/timestamp,
//!   offset (bytes) or lbn/lba (512-byte sectors), size/length, op/type/iotype, and
//!   volume/lun/disk). Without one, three layouts are recognised: 4 columns
//!   `timestamp,offset,size,op` (offset and size in bytes, time in µs); 7 columns with
//!   `Read`/`Write` in the 4th (MSR Cambridge: 100 ns ticks, host, disk, type, offset, size,
//!   response); 5 numeric columns (SNIA Tencent CBS: seconds, offset and size in sectors,
//!   0 = read / 1 = write, volume).
//! - `oracle-general`: libCacheSim's binary records, 24 bytes little-endian: u32 time (s),
//!   u64 object id, u32 size (bytes), i64 next access (ignored). Each object is one block.
//! - `vscsi`: CloudPhysics vscsi binary records, 32 bytes little-endian: u32 serial, u32 length
//!   (bytes), u32 sg count, u16 SCSI command (0x28 read, 0x2a write), u16 version, u64 lbn
//!   (sectors), u64 time (µs).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Bytes in a sector, the unit of LBAs and of the ARC paper's pages.
pub const SECTOR_BYTES: u64 = 512;

/// Longest line a text trace may have; a longer one is a malformed record.
pub const MAX_LINE_BYTES: u64 = 64 << 10;

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A read.
    Read,
    /// A write.
    Write,
}

/// What one trace record asks for: a byte range of a volume, or one whole object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// `length_bytes` from `offset_bytes`; the replay splits it into blocks.
    Bytes {
        /// Start of the range.
        offset_bytes: u64,
        /// Length of the range (0 counts as one block).
        length_bytes: u64,
    },
    /// A whole object (a block of its own size), as in oracleGeneral traces and text traces.
    Object {
        /// The object's id, used as the block number.
        id: u64,
        /// The object's size; `None` takes the replay's block size.
        size_bytes: Option<u32>,
    },
}

/// One record of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Time of the request in milliseconds, when the trace has times.
    pub time_ms: Option<u64>,
    /// The volume (disk, LUN) the request is for; 0 when the trace has one.
    pub volume: u64,
    /// Read or write.
    pub op: Op,
    /// What it touches.
    pub extent: Extent,
}

impl Record {
    /// An untimed read of `length_bytes` at `offset_bytes` of volume 0 (a `.lis` record).
    pub fn read_bytes(offset_bytes: u64, length_bytes: u64) -> Record {
        Record {
            time_ms: None,
            volume: 0,
            op: Op::Read,
            extent: Extent::Bytes {
                offset_bytes,
                length_bytes,
            },
        }
    }

    /// The blocks of `block_size_bytes` the record touches: (first block, count, size of
    /// each). A whole object is one block of its own size. More than `max_blocks` blocks, or
    /// a range past 2^64 bytes, is a malformed record.
    pub fn blocks(
        &self,
        block_size_bytes: u32,
        max_blocks: u64,
    ) -> Result<(u64, u64, u32), RecordError> {
        let bs = u64::from(block_size_bytes.max(1));
        match self.extent {
            Extent::Object { id, size_bytes } => {
                Ok((id, 1, size_bytes.unwrap_or(block_size_bytes)))
            }
            Extent::Bytes {
                offset_bytes,
                length_bytes,
            } => {
                // Its last byte, which may be 2^64 - 1 itself.
                let last = offset_bytes
                    .checked_add(length_bytes.max(1) - 1)
                    .ok_or(RecordError::PastU64Bytes)?;
                let first = offset_bytes / bs;
                let count = last / bs - first + 1;
                if count > max_blocks {
                    return Err(RecordError::TooManyBlocks { count, max_blocks });
                }
                Ok((first, count, block_size_bytes))
            }
        }
    }
}

/// Trace formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One block number per line.
    Text,
    /// The ARC paper's `.lis` format.
    Lis,
    /// Comma-separated block I/O records.
    Csv,
    /// libCacheSim oracleGeneral binary.
    OracleGeneral,
    /// CloudPhysics vscsi binary.
    Vscsi,
}

impl Format {
    /// All formats, with their command-line names.
    pub const ALL: [(Format, &'static str); 5] = [
        (Format::Text, "text"),
        (Format::Lis, "lis"),
        (Format::Csv, "csv"),
        (Format::OracleGeneral, "oracle-general"),
        (Format::Vscsi, "vscsi"),
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        Format::ALL
            .iter()
            .find(|(f, _)| *f == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }
}

impl FromStr for Format {
    type Err = UnknownFormatName;
    fn from_str(s: &str) -> Result<Format, UnknownFormatName> {
        Format::ALL
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(f, _)| *f)
            .ok_or_else(|| UnknownFormatName(s.to_string()))
    }
}

/// A format name that is not one of [`Format::ALL`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format {0:?} (one of: {names})", names = format_names())]
pub struct UnknownFormatName(pub String);

/// The command-line names of the formats, comma-separated.
fn format_names() -> String {
    let names: Vec<_> = Format::ALL.iter().map(|(_, n)| *n).collect();
    names.join(", ")
}

/// What is wrong with one trace record (or line): the reason in a [`TraceError::Parse`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A field that should be a non-negative integer is not.
    #[error("{what} {field:?} is not a non-negative integer")]
    NotInteger {
        /// What the field holds (`block number`, `offset`, ...).
        what: &'static str,
        /// The field as given, trimmed.
        field: String,
    },
    /// A `.lis` line has no page count.
    #[error("missing page count")]
    MissingPageCount,
    /// A `.lis` line asks for no pages.
    #[error("page count is 0")]
    ZeroPageCount,
    /// A value times its unit does not fit in 64 bits.
    #[error("{what} too large")]
    TooLarge {
        /// What overflowed (`start page`, `page count`, `offset`, `size`).
        what: &'static str,
    },
    /// The first CSV line is neither a header nor one of the known layouts.
    #[error(
        "CSV line with {columns} columns and no header: expected timestamp,offset,size,op \
         or a header row naming the columns"
    )]
    UnknownCsvLayout {
        /// The line's number of columns.
        columns: usize,
    },
    /// A CSV header names no column for a field every record needs.
    #[error("CSV header has no {names} column")]
    MissingCsvColumn {
        /// The column names looked for, as a phrase (`size or length`).
        names: &'static str,
    },
    /// A CSV line has fewer columns than the trace's layout.
    #[error("{found} columns where the trace has {expected}")]
    TooFewColumns {
        /// Columns on the line.
        found: usize,
        /// Columns of the layout.
        expected: usize,
    },
    /// A fractional timestamp is not a number.
    #[error("timestamp {0:?} is not a number")]
    TimestampNotNumber(String),
    /// A timestamp is negative or not finite.
    #[error("timestamp {0:?} is not a time")]
    TimestampNotTime(String),
    /// The operation field names neither a read nor a write.
    #[error("operation {0:?} is neither a read nor a write")]
    NotReadOrWrite(String),
    /// A vscsi record's SCSI command is neither a read nor a write.
    #[error("SCSI command {0:#x} is neither a read nor a write")]
    NotReadOrWriteCommand(u16),
    /// A binary trace ends inside a record.
    #[error("truncated record: {filled} of {size} bytes")]
    Truncated {
        /// Bytes of the record present.
        filled: usize,
        /// Bytes of a record.
        size: usize,
    },
    /// A text line is longer than [`MAX_LINE_BYTES`].
    #[error("line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    /// A text line is not UTF-8.
    #[error("line is not UTF-8 text")]
    NotUtf8,
    /// The record's byte range ends past 2^64 bytes.
    #[error("range ends past 2^64 bytes")]
    PastU64Bytes,
    /// The record touches more blocks than the reader allows ([`Record::blocks`]).
    #[error("record spans {count} blocks, more than the limit of {max_blocks}")]
    TooManyBlocks {
        /// Blocks the record touches.
        count: u64,
        /// The limit.
        max_blocks: u64,
    },
    /// The record's time, counted from the first record's, is past what the simulator's
    /// nanosecond clock holds.
    #[error(
        "time {time_ms} ms is {after_ms} ms after the first record's, past the simulator's \
         clock (584 years)"
    )]
    PastSimulatorClock {
        /// The record's time.
        time_ms: u64,
        /// How long after the first record's.
        after_ms: u64,
    },
}

/// Why a trace could not be read. Parse errors name the file and the line (or record).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A line or record is malformed.
    #[error("{}:{line}: {source}", path.display())]
    Parse {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number (text formats) or record number (binary formats).
        line: u64,
        /// What is wrong.
        source: RecordError,
    },
    /// The format could not be detected.
    #[error("{}: {reason}; choose one with --format", path.display())]
    UnknownFormat {
        /// The trace file.
        path: PathBuf,
        /// Why detection failed.
        reason: &'static str,
    },
}

/// Opens `path`, undoing zstd or gzip compression when its magic bytes say so.
pub fn open_decompressed(path: &Path) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let io_err = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = BufReader::with_capacity(1 << 20, File::open(path).map_err(io_err)?);
    let magic = file.fill_buf().map_err(io_err)?;
    if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let decoder = zstd::stream::read::Decoder::with_buffer(file).map_err(io_err)?;
        Ok(Box::new(BufReader::with_capacity(1 << 20, decoder)))
    } else if magic.starts_with(&[0x1f, 0x8b]) {
        let decoder = flate2::bufread::MultiGzDecoder::new(file);
        Ok(Box::new(BufReader::with_capacity(1 << 20, decoder)))
    } else if is_bzip2(magic) {
        Err(io_err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bzip2 compression is not supported: decompress it first (bzcat FILE > TRACE)",
        )))
    } else {
        Ok(Box::new(file))
    }
}

/// Whether `head` starts a bzip2 stream: "BZh", the block size digit, then the first
/// block's magic (the digits of pi), so a text trace that starts with "BZh" is not taken
/// for one.
fn is_bzip2(head: &[u8]) -> bool {
    head.len() >= 10
        && head.starts_with(b"BZh")
        && (b'1'..=b'9').contains(&head[3])
        && head[4..10] == [0x31, 0x41, 0x59, 0x26, 0x53, 0x59]
}

/// Guesses the format from the file name (ignoring `.zst`/`.gz`) and, failing that, from
/// the first bytes of its (decompressed) content.
pub fn detect_format(path: &Path) -> Result<Format, TraceError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let stem = name
        .trim_end_matches(".zst")
        .trim_end_matches(".gz")
        .to_string();
    for (ext, format) in [
        (".lis", Format::Lis),
        (".csv", Format::Csv),
        (".vscsi", Format::Vscsi),
        (".oraclegeneral", Format::OracleGeneral),
        (".oraclegeneral.bin", Format::OracleGeneral),
        (".trace", Format::Text),
        (".txt", Format::Text),
    ] {
        if stem.ends_with(ext) {
            return Ok(format);
        }
    }
    let mut reader = open_decompressed(path)?;
    let mut head = vec![0u8; 4096];
    let mut filled = 0;
    while filled < head.len() {
        let n = reader
            .read(&mut head[filled..])
            .map_err(|source| TraceError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    head.truncate(filled);
    let unknown = |reason| TraceError::UnknownFormat {
        path: path.to_path_buf(),
        reason,
    };
    let text =
        std::str::from_utf8(&head).map_err(|_| unknown("binary content of unknown layout"))?;
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with('#') && l.trim() != "*")
        .ok_or_else(|| unknown("no records in the first 4 KiB"))?;
    if first.contains(',') {
        return Ok(Format::Csv);
    }
    match first.split_whitespace().count() {
        1 => Ok(Format::Text),
        4 => Ok(Format::Lis),
        _ => Err(unknown("cannot tell the format from the first line")),
    }
}

/// A streaming reader of trace records.
pub struct TraceReader {
    path: PathBuf,
    input: Box<dyn BufRead + Send>,
    format: Format,
    line_number: u64,
    line: String,
    csv: Option<CsvLayout>,
    record: Vec<u8>,
    timed: bool,
}

impl TraceReader {
    /// Opens `path` in `format` (or the detected one when `None`).
    pub fn open(path: &Path, format: Option<Format>) -> Result<TraceReader, TraceError> {
        let format = match format {
            Some(f) => f,
            None => detect_format(path)?,
        };
        Ok(TraceReader::over(
            path.to_path_buf(),
            open_decompressed(path)?,
            format,
        ))
    }

    /// A reader of `input` in `format`, at its first record; errors name `path`.
    fn over(path: PathBuf, input: Box<dyn BufRead + Send>, format: Format) -> TraceReader {
        TraceReader {
            path,
            input,
            format,
            line_number: 0,
            line: String::new(),
            csv: None,
            record: Vec::new(),
            timed: false,
        }
    }

    /// The format being read.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether a record read so far had a time. A format says only whether its records may
    /// have one (a CSV trace has times only if it has a time column), so what a trace's
    /// times are worth is known from its records.
    pub fn any_timed(&self) -> bool {
        self.timed
    }

    /// The line (text formats) or record (binary formats) last read, 1-based.
    pub fn position(&self) -> u64 {
        self.line_number
    }

    /// An error about the record last read, naming the file and the record's line (or
    /// number): for what a reader of the records finds wrong with one.
    pub fn parse_error(&self, source: RecordError) -> TraceError {
        TraceError::Parse {
            path: self.path.clone(),
            line: self.line_number,
            source,
        }
    }

    /// Reads the next record: `Ok(None)` at the end; `Err` for an I/O error or a malformed
    /// record (the reader stays usable: the next call continues after the bad one).
    pub fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        let record = match self.format {
            Format::OracleGeneral => self.next_binary(24),
            Format::Vscsi => self.next_binary(32),
            _ => self.next_line(),
        }?;
        self.timed |= record.is_some_and(|r| r.time_ms.is_some());
        Ok(record)
    }

    fn next_binary(&mut self, size: usize) -> Result<Option<Record>, TraceError> {
        self.record.resize(size, 0);
        let mut filled = 0;
        while filled < size {
            let n = self
                .input
                .read(&mut self.record[filled..])
                .map_err(|source| TraceError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            return Ok(None);
        }
        self.line_number += 1;
        if filled < size {
            return Err(self.parse_error(RecordError::Truncated { filled, size }));
        }
        let r = &self.record;
        let u32_at = |i: usize| u32::from_le_bytes(r[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
        let u16_at = |i: usize| u16::from_le_bytes(r[i..i + 2].try_into().expect("2 bytes"));
        if self.format == Format::OracleGeneral {
            let size_bytes = u32_at(12);
            return Ok(Some(Record {
                time_ms: Some(u64::from(u32_at(0)) * 1000),
                volume: 0,
                op: Op::Read,
                extent: Extent::Object {
                    id: u64_at(4),
                    size_bytes: (size_bytes > 0).then_some(size_bytes),
                },
            }));
        }
        let op = match u16_at(12) {
            0x28 | 0x08 | 0x88 | 0xa8 => Op::Read,
            0x2a | 0x0a | 0x8a | 0xaa => Op::Write,
            other => {
                return Err(self.parse_error(RecordError::NotReadOrWriteCommand(other)));
            }
        };
        Ok(Some(Record {
            time_ms: Some(u64_at(24) / 1000),
            volume: 0,
            op,
            extent: Extent::Bytes {
                offset_bytes: u64_at(16).saturating_mul(SECTOR_BYTES),
                length_bytes: u64::from(u32_at(4)),
            },
        }))
    }

    fn next_line(&mut self) -> Result<Option<Record>, TraceError> {
        loop {
            self.record.clear();
            let n = (&mut self.input)
                .take(MAX_LINE_BYTES)
                .read_until(b'\n', &mut self.record)
                .map_err(|source| TraceError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.line_number += 1;
            if n as u64 == MAX_LINE_BYTES && self.record.last() != Some(&b'\n') {
                self.skip_rest_of_line()?;
                return Err(self.parse_error(RecordError::LineTooLong));
            }
            self.line.clear();
            match std::str::from_utf8(&self.record) {
                Ok(text) => self.line.push_str(text),
                Err(_) => return Err(self.parse_error(RecordError::NotUtf8)),
            }
            let line = self.line.trim();
            if line.is_empty() || line.starts_with('#') || line == "*" {
                continue;
            }
            let parsed = match self.format {
                Format::Text => parse_text(line),
                Format::Lis => parse_lis(line),
                Format::Csv => {
                    if self.csv.is_none() {
                        let (layout, is_header) =
                            CsvLayout::detect(line).map_err(|m| self.parse_error(m))?;
                        self.csv = Some(layout);
                        if is_header {
                            continue;
                        }
                    }
                    self.csv.as_ref().expect("layout set").parse(line)
                }
                Format::OracleGeneral | Format::Vscsi => unreachable!("binary formats"),
            };
            return parsed.map(Some).map_err(|m| self.parse_error(m));
        }
    }
}

impl TraceReader {
    /// Discards input up to and including the next newline.
    fn skip_rest_of_line(&mut self) -> Result<(), TraceError> {
        loop {
            let buf = self.input.fill_buf().map_err(|source| TraceError::Io {
                path: self.path.clone(),
                source,
            })?;
            if buf.is_empty() {
                return Ok(());
            }
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.input.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let len = buf.len();
                    self.input.consume(len);
                }
            }
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

fn parse_u64(field: &str, what: &'static str) -> Result<u64, RecordError> {
    let field = field.trim();
    field.parse::<u64>().map_err(|_| RecordError::NotInteger {
        what,
        field: field.to_string(),
    })
}

fn parse_text(line: &str) -> Result<Record, RecordError> {
    let block = parse_u64(line, "block number")?;
    Ok(Record {
        time_ms: None,
        volume: 0,
        op: Op::Read,
        extent: Extent::Object {
            id: block,
            size_bytes: None,
        },
    })
}

fn parse_lis(line: &str) -> Result<Record, RecordError> {
    let mut fields = line.split_whitespace();
    let start = parse_u64(fields.next().unwrap_or(""), "start page")?;
    let count = parse_u64(
        fields.next().ok_or(RecordError::MissingPageCount)?,
        "page count",
    )?;
    if count == 0 {
        return Err(RecordError::ZeroPageCount);
    }
    let offset_bytes = start
        .checked_mul(SECTOR_BYTES)
        .ok_or(RecordError::TooLarge { what: "start page" })?;
    let length_bytes = count
        .checked_mul(SECTOR_BYTES)
        .ok_or(RecordError::TooLarge { what: "page count" })?;
    Ok(Record::read_bytes(offset_bytes, length_bytes))
}

/// Units of a CSV time column.
#[derive(Clone, Copy, Debug, PartialEq)]
enum TimeUnit {
    /// Seconds, possibly fractional.
    Seconds,
    Microseconds,
    /// 100-nanosecond ticks (Windows FILETIME).
    Ticks100ns,
}

/// Which column holds what, and in which unit.
#[derive(Clone, Debug, PartialEq)]
struct CsvLayout {
    columns: usize,
    time: Option<(usize, TimeUnit)>,
    offset: usize,
    offset_unit_bytes: u64,
    size: usize,
    size_unit_bytes: u64,
    op: usize,
    volume: Option<usize>,
}

impl CsvLayout {
    /// Finds the layout from the first record line; returns whether that line is a header.
    fn detect(line: &str) -> Result<(CsvLayout, bool), RecordError> {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let is_number = |f: &str| f.parse::<f64>().is_ok();
        // A header names every column; a record has numbers in it.
        let looks_like_header = !fields.iter().any(|f| is_number(f));
        if looks_like_header {
            return CsvLayout::from_header(&fields).map(|l| (l, true));
        }
        let layout = match fields.len() {
            4 => CsvLayout {
                columns: 4,
                time: Some((0, TimeUnit::Microseconds)),
                offset: 1,
                offset_unit_bytes: 1,
                size: 2,
                size_unit_bytes: 1,
                op: 3,
                volume: None,
            },
            7 if is_op(fields[3]) => CsvLayout {
                columns: 7,
                time: Some((0, TimeUnit::Ticks100ns)),
                offset: 4,
                offset_unit_bytes: 1,
                size: 5,
                size_unit_bytes: 1,
                op: 3,
                volume: Some(2),
            },
            5 if fields.iter().all(|f| is_number(f)) => CsvLayout {
                columns: 5,
                time: Some((0, TimeUnit::Seconds)),
                offset: 1,
                offset_unit_bytes: SECTOR_BYTES,
                size: 2,
                size_unit_bytes: SECTOR_BYTES,
                op: 3,
                volume: Some(4),
            },
            columns => return Err(RecordError::UnknownCsvLayout { columns }),
        };
        Ok((layout, false))
    }

    fn from_header(names: &[&str]) -> Result<CsvLayout, RecordError> {
        let find = |candidates: &[&str]| {
            names.iter().position(|n| {
                let n = n.to_ascii_lowercase();
                candidates.iter().any(|c| n == *c)
            })
        };
        let time = find(&["time", "timestamp", "ts", "clock_time"]);
        let (offset, offset_unit_bytes) = match find(&["offset", "offset_bytes", "byte_offset"]) {
            Some(i) => (i, 1),
            None => (
                find(&["lbn", "lba", "sector", "offset_sectors"]).ok_or(
                    RecordError::MissingCsvColumn {
                        names: "offset, lba or lbn",
                    },
                )?,
                SECTOR_BYTES,
            ),
        };
        let size = find(&["size", "length", "len", "size_bytes", "bytes"]).ok_or(
            RecordError::MissingCsvColumn {
                names: "size or length",
            },
        )?;
        let op = find(&["op", "type", "iotype", "io_type", "rw", "opcode", "cmd"]).ok_or(
            RecordError::MissingCsvColumn {
                names: "op, type or iotype",
            },
        )?;
        let volume = find(&["volume", "lun", "disk", "device", "volume_id"]);
        // cloudPhysics-style headers name the time `time` in µs; SYSTOR names it `Timestamp`
        // in fractional seconds. The unit is decided per value: a decimal point means seconds.
        Ok(CsvLayout {
            columns: names.len(),
            time: time.map(|i| (i, TimeUnit::Microseconds)),
            offset,
            offset_unit_bytes,
            size,
            size_unit_bytes: 1,
            op,
            volume,
        })
    }

    fn parse(&self, line: &str) -> Result<Record, RecordError> {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() < self.columns {
            return Err(RecordError::TooFewColumns {
                found: fields.len(),
                expected: self.columns,
            });
        }
        let time_ms = match self.time {
            None => None,
            Some((i, unit)) => Some(parse_time_ms(fields[i], unit)?),
        };
        let offset = parse_u64(fields[self.offset], "offset")?;
        let size = parse_u64(fields[self.size], "size")?;
        let op = parse_op(fields[self.op])?;
        let volume = match self.volume {
            Some(i) => parse_u64(fields[i], "volume")?,
            None => 0,
        };
        Ok(Record {
            time_ms,
            volume,
            op,
            extent: Extent::Bytes {
                offset_bytes: offset
                    .checked_mul(self.offset_unit_bytes)
                    .ok_or(RecordError::TooLarge { what: "offset" })?,
                length_bytes: size
                    .checked_mul(self.size_unit_bytes)
                    .ok_or(RecordError::TooLarge { what: "size" })?,
            },
        })
    }
}

fn parse_time_ms(field: &str, unit: TimeUnit) -> Result<u64, RecordError> {
    if field.contains('.') || unit == TimeUnit::Seconds {
        let seconds: f64 = field
            .parse()
            .map_err(|_| RecordError::TimestampNotNumber(field.to_string()))?;
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(RecordError::TimestampNotTime(field.to_string()));
        }
        return Ok((seconds * 1000.0) as u64);
    }
    let value = parse_u64(field, "timestamp")?;
    Ok(match unit {
        TimeUnit::Microseconds => value / 1000,
        TimeUnit::Ticks100ns => value / 10_000,
        TimeUnit::Seconds => value * 1000,
    })
}

fn is_op(field: &str) -> bool {
    parse_op(field).is_ok() && field.chars().any(|c| c.is_ascii_alphabetic())
}

fn parse_op(field: &str) -> Result<Op, RecordError> {
    match field.trim().to_ascii_lowercase().as_str() {
        "r" | "read" | "rs" | "0" | "28" | "0x28" => Ok(Op::Read),
        "w" | "write" | "ws" | "1" | "2a" | "0x2a" => Ok(Op::Write),
        other => Err(RecordError::NotReadOrWrite(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bzip2 file is refused as one, naming what to do (a tester's finding: it was "binary
    /// content of unknown layout; choose one with --format", which no format helps); text
    /// that merely starts with "BZh" is read as text.
    #[test]
    fn bzip2_is_named_and_refused() {
        let dir = std::env::temp_dir().join(format!("larch-bz2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // bzip2 of "1\n".
        let bz2: [u8; 39] = [
            66, 90, 104, 57, 49, 65, 89, 38, 83, 89, 50, 41, 33, 189, 0, 0, 0, 200, 0, 0, 16, 32,
            0, 32, 0, 33, 0, 130, 177, 119, 36, 83, 133, 9, 3, 34, 146, 27, 208,
        ];
        let path = dir.join("trace.bz2");
        std::fs::write(&path, bz2).unwrap();
        let err = open_decompressed(&path).err().expect("refused").to_string();
        assert!(err.contains("bzip2 compression is not supported"), "{err}");
        let text = dir.join("trace.txt");
        std::fs::write(&text, "BZh91AY\n").unwrap();
        let mut read = String::new();
        open_decompressed(&text)
            .unwrap()
            .read_to_string(&mut read)
            .unwrap();
        assert_eq!(read, "BZh91AY\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A range whose last byte is the last of the 2^64 addressable ones is read (a tester's
    /// finding: it was refused as ending past them); one byte more is refused.
    #[test]
    fn a_range_may_end_at_the_top_of_the_address_space() {
        let record = Record::read_bytes;
        let top = u64::MAX - 4095;
        assert_eq!(
            record(top, 4096).blocks(4096, 16),
            Ok((u64::MAX / 4096, 1, 4096))
        );
        assert_eq!(
            record(top, 0).blocks(4096, 16),
            Ok((u64::MAX / 4096, 1, 4096))
        );
        assert!(record(top, 4097).blocks(4096, 16).is_err());
        assert_eq!(record(0, 8192).blocks(4096, 16), Ok((0, 2, 4096)));
        assert_eq!(record(4095, 2).blocks(4096, 16), Ok((0, 2, 4096)));
    }

    #[test]
    fn text_lines() {
        assert_eq!(
            parse_text("42").unwrap().extent,
            Extent::Object {
                id: 42,
                size_bytes: None
            }
        );
        assert!(parse_text("x").is_err());
        assert!(parse_text("-1").is_err());
    }

    #[test]
    fn lis_lines() {
        let r = parse_lis("1842745 64 0 1").unwrap();
        assert_eq!(
            r.extent,
            Extent::Bytes {
                offset_bytes: 1842745 * 512,
                length_bytes: 64 * 512
            }
        );
        assert!(parse_lis("5").is_err());
        assert!(parse_lis("5 0 0 0").is_err());
        assert!(parse_lis("18446744073709551615 1 0 0").is_err());
    }

    #[test]
    fn csv_generic_four_columns() {
        let (layout, header) = CsvLayout::detect("1000,4096,8192,R").unwrap();
        assert!(!header);
        let r = layout.parse("2000000,4096,8192,W").unwrap();
        assert_eq!(r.time_ms, Some(2000));
        assert_eq!(r.op, Op::Write);
        assert_eq!(
            r.extent,
            Extent::Bytes {
                offset_bytes: 4096,
                length_bytes: 8192
            }
        );
    }

    #[test]
    fn csv_msr_and_tencent_layouts() {
        let line = "128166385295514663,hm,0,Write,9056014336,2048,2833";
        let (layout, header) = CsvLayout::detect(line).unwrap();
        assert!(!header);
        let r = layout.parse(line).unwrap();
        assert_eq!(r.op, Op::Write);
        assert_eq!(r.time_ms, Some(128166385295514663 / 10_000));
        assert_eq!(
            r.extent,
            Extent::Bytes {
                offset_bytes: 9056014336,
                length_bytes: 2048
            }
        );
        let line = "1538323200,4247200,128,1,1058";
        let (layout, _) = CsvLayout::detect(line).unwrap();
        let r = layout.parse(line).unwrap();
        assert_eq!(r.volume, 1058);
        assert_eq!(r.op, Op::Write);
        assert_eq!(
            r.extent,
            Extent::Bytes {
                offset_bytes: 4247200 * 512,
                length_bytes: 128 * 512
            }
        );
    }

    #[test]
    fn csv_with_header() {
        let (layout, header) = CsvLayout::detect("version,time,op,size,lbn").unwrap();
        assert!(header);
        let r = layout.parse("1,5633898368802,2a,512,42932745").unwrap();
        assert_eq!(r.op, Op::Write);
        assert_eq!(r.time_ms, Some(5633898368));
        assert_eq!(
            r.extent,
            Extent::Bytes {
                offset_bytes: 42932745 * 512,
                length_bytes: 512
            }
        );
        let (layout, _) = CsvLayout::detect("Timestamp,Response,IOType,LUN,Offset,Size").unwrap();
        let r = layout
            .parse("1456095145.133076000,0.000806000,R,0,899056122368,131072")
            .unwrap();
        assert_eq!(r.time_ms, Some(1456095145133));
        assert_eq!(r.op, Op::Read);
    }

    #[test]
    fn csv_errors_name_the_problem() {
        assert!(CsvLayout::detect("a,b").is_err());
        let (layout, _) = CsvLayout::detect("1,2,3,R").unwrap();
        assert!(
            layout
                .parse("1,2,3")
                .unwrap_err()
                .to_string()
                .contains("columns")
        );
        assert!(
            layout
                .parse("1,x,3,R")
                .unwrap_err()
                .to_string()
                .contains("offset")
        );
        assert!(
            layout
                .parse("1,2,3,Q")
                .unwrap_err()
                .to_string()
                .contains("neither")
        );
    }

    fn reader_over(bytes: &[u8], format: Format) -> TraceReader {
        TraceReader::over(
            PathBuf::from("mem"),
            Box::new(io::Cursor::new(bytes.to_vec())),
            format,
        )
    }

    #[test]
    fn bad_lines_are_errors_and_reading_goes_on() {
        let mut long = vec![b'7'; MAX_LINE_BYTES as usize + 10];
        long.extend_from_slice(b"\n5\n\xff\xfe\n6\n");
        let mut reader = reader_over(&long, Format::Text);
        let err = reader.next_record().unwrap_err().to_string();
        assert!(err.starts_with("mem:1: line longer"), "{err}");
        assert_eq!(
            reader.next_record().unwrap().unwrap().extent,
            Extent::Object {
                id: 5,
                size_bytes: None
            }
        );
        let err = reader.next_record().unwrap_err().to_string();
        assert!(err.contains("mem:3") && err.contains("UTF-8"), "{err}");
        assert!(reader.next_record().unwrap().is_some());
        assert!(reader.next_record().unwrap().is_none());
    }

    #[test]
    fn binary_records() {
        let mut og = Vec::new();
        og.extend_from_slice(&7u32.to_le_bytes());
        og.extend_from_slice(&42u64.to_le_bytes());
        og.extend_from_slice(&8192u32.to_le_bytes());
        og.extend_from_slice(&(-1i64).to_le_bytes());
        og.extend_from_slice(&[1, 2, 3]); // a truncated second record
        let mut reader = reader_over(&og, Format::OracleGeneral);
        let r = reader.next_record().unwrap().unwrap();
        assert_eq!(r.time_ms, Some(7000));
        assert_eq!(
            r.extent,
            Extent::Object {
                id: 42,
                size_bytes: Some(8192)
            }
        );
        assert!(
            reader
                .next_record()
                .unwrap_err()
                .to_string()
                .contains("truncated")
        );
        assert!(reader.next_record().unwrap().is_none());

        let mut vscsi = Vec::new();
        for (cmd, lbn) in [(0x28u16, 10u64), (0x2a, 20), (0x12, 30)] {
            vscsi.extend_from_slice(&1u32.to_le_bytes());
            vscsi.extend_from_slice(&4096u32.to_le_bytes());
            vscsi.extend_from_slice(&1u32.to_le_bytes());
            vscsi.extend_from_slice(&cmd.to_le_bytes());
            vscsi.extend_from_slice(&256u16.to_le_bytes());
            vscsi.extend_from_slice(&lbn.to_le_bytes());
            vscsi.extend_from_slice(&5_000_000u64.to_le_bytes());
        }
        let mut reader = reader_over(&vscsi, Format::Vscsi);
        let r = reader.next_record().unwrap().unwrap();
        assert_eq!((r.op, r.time_ms), (Op::Read, Some(5000)));
        assert_eq!(
            r.extent,
            Extent::Bytes {
                offset_bytes: 10 * 512,
                length_bytes: 4096
            }
        );
        assert_eq!(reader.next_record().unwrap().unwrap().op, Op::Write);
        assert!(reader.next_record().is_err(), "command 0x12 is not I/O");
    }

    #[test]
    fn the_reader_tells_whether_any_record_had_a_time() {
        // A CSV trace with a header but no time column is untimed, whatever its format.
        let mut reader = reader_over(b"offset,size,op\n0,4096,R\n4096,4096,R\n", Format::Csv);
        while reader.next_record().unwrap().is_some() {}
        assert!(!reader.any_timed());
        let mut reader = reader_over(b"time,offset,size,op\n5,0,4096,R\n", Format::Csv);
        assert!(!reader.any_timed(), "nothing read yet");
        reader.next_record().unwrap();
        assert!(reader.any_timed());
    }

    #[test]
    fn format_names_round_trip() {
        for (format, name) in Format::ALL {
            assert_eq!(name.parse::<Format>().unwrap(), format);
            assert_eq!(format.name(), name);
        }
        assert!("nope".parse::<Format>().is_err());
    }
}
