//! `docs/format.md` must describe exactly the layout the code uses.

use larch_format::layout::{FieldLayout, LAYOUTS};

const DOC: &str = include_str!("../../../docs/format.md");

/// A structure as the document describes it.
#[derive(Debug)]
struct DocStruct {
    name: String,
    size: usize,
    fields: Vec<(usize, usize, String, String)>,
}

/// Finds every `### `NamePhys` — N bytes` heading and the table that follows it.
fn parse(doc: &str) -> Vec<DocStruct> {
    let mut out = Vec::new();
    let mut lines = doc.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("### `") else {
            continue;
        };
        let (name, tail) = rest.split_once('`').expect("heading closes its backtick");
        if !name.ends_with("Phys") {
            continue;
        }
        let size = tail
            .trim()
            .trim_start_matches('—')
            .trim()
            .strip_suffix(" bytes")
            .unwrap_or_else(|| panic!("heading of {name} states its size: {tail:?}"))
            .parse()
            .unwrap();
        // Skip to the table's header row, then its separator.
        for l in lines.by_ref() {
            if l.starts_with("| offset") {
                break;
            }
        }
        lines.next();
        let mut fields = Vec::new();
        while let Some(row) = lines.peek().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            fields.push((
                cells[1]
                    .parse()
                    .unwrap_or_else(|_| panic!("offset in {row}")),
                cells[2].parse().unwrap_or_else(|_| panic!("size in {row}")),
                cells[3].trim_matches('`').to_string(),
                cells[4].to_string(),
            ));
            lines.next();
        }
        out.push(DocStruct {
            name: name.to_string(),
            size,
            fields,
        });
    }
    out
}

#[test]
fn every_structure_in_the_code_is_documented_exactly() {
    let documented = parse(DOC);
    let names: Vec<&str> = documented.iter().map(|d| d.name.as_str()).collect();
    let code_names: Vec<&str> = LAYOUTS.iter().map(|l| l.name).collect();
    assert_eq!(
        names, code_names,
        "documented structures differ from the code's"
    );
    for (doc, code) in documented.iter().zip(LAYOUTS) {
        assert_eq!(doc.size, code.size, "{}: size", code.name);
        let code_fields: Vec<(usize, usize, String, String)> = code
            .fields
            .iter()
            .map(|f: &FieldLayout| (f.offset, f.size, f.name.to_string(), f.ty.to_string()))
            .collect();
        assert_eq!(doc.fields, code_fields, "{}: fields", code.name);
    }
}

#[test]
fn the_parser_notices_a_wrong_offset() {
    // Guard against a parser that silently finds nothing: damage one row and the
    // comparison must change.
    let damaged = DOC.replacen("| 8 | 4 | `version` |", "| 9 | 4 | `version` |", 1);
    assert_ne!(damaged, DOC, "the version row was not found");
    let parsed = parse(&damaged);
    let header = parsed.iter().find(|d| d.name == "DevHeaderPhys").unwrap();
    assert_eq!(header.fields[1].0, 9);
    assert!(parse(DOC).iter().all(|d| !d.fields.is_empty()));
}
