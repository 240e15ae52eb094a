//! Unit tests of the edge-case table (kept beside `edges.rs`, which is long enough).

use super::*;

#[test]
fn the_table_has_every_case() {
    let rows: Vec<EdgeResult> = CASES
        .iter()
        .map(|(c, w, _)| EdgeResult {
            case: (*c).into(),
            what: (*w).into(),
            ..EdgeResult::default()
        })
        .collect();
    let md = markdown(&rows);
    assert_eq!(
        md.lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| case") && !l.starts_with("| ---"))
            .count(),
        10
    );
}
