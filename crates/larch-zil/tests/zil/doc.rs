//! `docs/zil.md` must describe exactly the layout the code uses.

use larch_format::zil::layout::LAYOUTS;

const DOC: &str = include_str!("../../../../docs/zil.md");

/// `(offset, size, name, type)` of one documented field.
type Row = (usize, usize, String, String);

/// Every `### `NamePhys` — N bytes` section of `doc`, with the rows of the first table
/// after its heading.
fn documented(doc: &str) -> Vec<(String, usize, Vec<Row>)> {
    let mut out = Vec::new();
    let mut current: Option<(String, usize, Vec<Row>, bool)> = None;
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("### `") {
            if let Some((name, size, rows, _)) = current.take() {
                out.push((name, size, rows));
            }
            let (name, rest) = heading
                .split_once('`')
                .expect("heading closes its backtick");
            if !name.ends_with("Phys") {
                continue;
            }
            let size = rest
                .trim_start_matches([' ', '—'])
                .strip_suffix(" bytes")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("the heading of {name} must end in `— N bytes`"));
            current = Some((name.to_string(), size, Vec::new(), false));
            continue;
        }
        let Some((_, _, rows, table_done)) = current.as_mut() else {
            continue;
        };
        if *table_done {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let is_row = line.starts_with('|') && cells.len() >= 6;
        match cells.get(1).and_then(|c| c.parse::<usize>().ok()) {
            Some(offset) if is_row => rows.push((
                offset,
                cells[2].parse().expect("size cell"),
                cells[3].trim_matches('`').to_string(),
                cells[4].to_string(),
            )),
            _ if !rows.is_empty() && !line.starts_with('|') => *table_done = true,
            _ => {}
        }
    }
    if let Some((name, size, rows, _)) = current {
        out.push((name, size, rows));
    }
    out
}

#[test]
fn every_log_structure_is_documented_exactly() {
    let doc = documented(DOC);
    let names: Vec<&str> = doc.iter().map(|d| d.0.as_str()).collect();
    let code: Vec<&str> = LAYOUTS.iter().map(|l| l.name).collect();
    assert_eq!(names, code, "documented structures differ from the code's");
    for ((name, size, rows), layout) in doc.iter().zip(LAYOUTS) {
        assert_eq!(*size, layout.size, "{name}: size");
        let expected: Vec<Row> = layout
            .fields
            .iter()
            .map(|f| (f.offset, f.size, f.name.to_string(), f.ty.to_string()))
            .collect();
        assert_eq!(rows, &expected, "{name}: fields");
    }
}

#[test]
fn the_doc_parser_sees_a_changed_row() {
    let changed = DOC.replacen("| 72 | 4 | `body_bytes` |", "| 72 | 8 | `body_bytes` |", 1);
    assert_ne!(changed, DOC, "the body_bytes row was not found");
    let block = documented(&changed)
        .into_iter()
        .find(|d| d.0 == "ZilBlockPhys")
        .unwrap();
    assert_eq!(
        block.2[10],
        (72, 8, "body_bytes".to_string(), "u32".to_string())
    );
    assert!(documented(DOC).iter().all(|d| d.2.len() > 5));
}
