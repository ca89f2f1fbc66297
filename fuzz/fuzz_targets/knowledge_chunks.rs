//! The knowledge-file chunker (`.md` and `.txt`), as the index calls it, on
//! any text: it never panics, and every chunk is a non-empty byte range of
//! the text, on character boundaries, trimmed of whitespace, in order and
//! never overlapping another.
#![no_main]

use libfuzzer_sys::fuzz_target;
use projectors_rag::split_knowledge_file;

fuzz_target!(|data: &[u8]| {
    let Some((choice, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let markdown = choice & 1 == 0;
    let (_title, chunks) = split_knowledge_file(text, markdown);
    let mut end = 0;
    for (path, range) in &chunks {
        assert!(range.start >= end, "chunks overlap or go backwards");
        assert!(
            range.start < range.end && range.end <= text.len(),
            "a range outside the text"
        );
        assert!(
            text.is_char_boundary(range.start) && text.is_char_boundary(range.end),
            "a range cuts a character"
        );
        let piece = &text[range.clone()];
        assert_eq!(piece, piece.trim(), "a chunk is not trimmed");
        if !markdown {
            assert!(path.is_empty(), "plain text has no headings");
        }
        end = range.end;
    }
});
