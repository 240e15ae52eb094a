//! grep over a large spool: matches, context, offsets and line numbers, bounded results.

use stockade_log::{GrepRequest, OutputConfig, OutputLog};
use stockade_proto::Stream;

/// Fixed-width filler lines so offsets and line numbers are computable.
const LINE: usize = 32;
const CHUNK_LINES: usize = (1 << 20) / LINE;

fn filler_chunk(c: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(1 << 20);
    for i in 0..CHUNK_LINES {
        let line = format!("filler chunk {c:05} line {i:06}");
        buf.extend_from_slice(format!("{line:<width$}\n", width = LINE - 1).as_bytes());
    }
    assert_eq!(buf.len(), 1 << 20);
    buf
}

#[test]
fn grep_with_context_over_a_200_mib_spool() {
    let t = tempfile::tempdir().unwrap();
    let log = OutputLog::create(t.path().join("sh-1"), OutputConfig::default()).unwrap();
    let chunk = filler_chunk(0);
    // (offset, line number) of each needle, computed while writing.
    let mut needles = Vec::new();
    let (mut offset, mut lines) = (0u64, 0u64);
    for c in 0..200 {
        log.append(Stream::Stdout, &chunk).unwrap();
        offset += chunk.len() as u64;
        lines += CHUNK_LINES as u64;
        if [49, 149, 199].contains(&c) {
            let needle = format!("NEEDLE after chunk {c}\n");
            needles.push((offset, lines + 1, needle.trim_end().to_string()));
            log.append(Stream::Stderr, needle.as_bytes()).unwrap();
            offset += needle.len() as u64;
            lines += 1;
        }
    }
    log.finish().unwrap();
    assert!(log.stats().total_bytes > 200 << 20);

    let g = log
        .grep(&GrepRequest {
            pattern: "needle AFTER".into(),
            context: 1,
            ignore_case: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!((g.matches, g.truncated), (3, false));
    assert_eq!(g.spool_path, log.spool_path());
    let matches: Vec<_> = g
        .lines
        .iter()
        .filter(|l| l.is_match)
        .map(|l| (l.offset, l.line_number, l.text.clone()))
        .collect();
    assert_eq!(matches, needles);
    // Context: the filler line before each needle, and after it (none after the last).
    assert_eq!(g.lines.len(), 3 + 3 + 2);
    let first_before = &g.lines[0];
    assert!(!first_before.is_match);
    assert_eq!(first_before.line_number, needles[0].1 - 1);
    assert_eq!(first_before.offset, needles[0].0 - LINE as u64);
    assert_eq!(
        first_before.text,
        format!("{:<31}", format!("filler chunk 00000 line {:06}", CHUNK_LINES - 1))
    );
    let first_after = &g.lines[2];
    assert_eq!(
        (first_after.line_number, first_after.offset),
        (needles[0].1 + 1, needles[0].0 + "NEEDLE after chunk 49\n".len() as u64)
    );

    // The match cap stops the search and says so.
    let g = log
        .grep(&GrepRequest { pattern: "NEEDLE".into(), max_matches: 2, ..Default::default() })
        .unwrap();
    assert_eq!((g.matches, g.truncated, g.lines.len()), (2, true, 2));
    // Stream filter: the needles went to stderr, the filler to stdout.
    let g = log
        .grep(&GrepRequest {
            pattern: "chunk 1[0-9]{2}$|line 000000".into(),
            stream: Some(Stream::Stderr),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(g.matches, 2);
    assert!(g.lines.iter().all(|l| l.text.starts_with("NEEDLE")));
}

#[test]
fn a_giant_line_is_skipped_past_with_offsets_and_line_numbers_exact() {
    let t = tempfile::tempdir().unwrap();
    let log = OutputLog::create(t.path().join("sh-1"), OutputConfig::default()).unwrap();
    // Two lines longer than the searcher may hold (64 MiB), each followed by a needle; a match
    // inside the searched start of a giant line is found too.
    let mut expected = Vec::new();
    let (mut offset, mut line) = (0u64, 0u64);
    for n in 0..2 {
        let mut giant = vec![b'a'; 70 << 20];
        giant[..12].copy_from_slice(b"giant-start ");
        giant.push(b'\n');
        expected.push((offset, line + 1, "giant-start".to_string()));
        log.append(Stream::Stdout, &giant).unwrap();
        offset += giant.len() as u64;
        line += 1;
        let needle = format!("needle {n}\n");
        expected.push((offset, line + 1, format!("needle {n}")));
        log.append(Stream::Stdout, needle.as_bytes()).unwrap();
        offset += needle.len() as u64;
        line += 1;
    }
    log.finish().unwrap();
    let g = log
        .grep(&GrepRequest { pattern: "needle|giant-start".into(), ..Default::default() })
        .unwrap();
    assert_eq!((g.matches, g.truncated), (4, false));
    for (got, (offset, line, text)) in g.lines.iter().zip(&expected) {
        assert_eq!((got.offset, got.line_number), (*offset, *line), "{text}");
        assert!(got.text.starts_with(text.as_str()), "{} is not {text}", &got.text[..20]);
    }
}
