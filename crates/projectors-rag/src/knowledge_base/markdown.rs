//! Chunking Markdown by headings.
//!
//! - A chunk belongs to the section under one ATX heading (`#` to `######`,
//!   up to three spaces of indentation, optional closing `#`s); its heading
//!   path is the stack of enclosing headings, the document's H1 first. Text
//!   before the first heading has an empty path. Setext headings (`===`,
//!   `---` underlines) are not headings here.
//! - `#` lines inside fenced code blocks (```` ``` ```` or `~~~`) are text.
//! - A section's text is split into paragraphs at blank lines outside fences;
//!   consecutive paragraphs are packed into one chunk while it stays within
//!   the size target. A single larger paragraph stays whole.
//! - A chunk's text is an exact byte range of the document, trimmed of
//!   surrounding whitespace. Sections with no text (a heading directly
//!   followed by another) give no chunk.

use std::ops::Range;

/// One chunk: its heading path and its exact byte range in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkdownChunk {
    /// Enclosing headings, outermost first.
    pub(crate) heading_path: Vec<String>,
    /// The chunk's text in the document (trimmed).
    pub(crate) range: Range<usize>,
}

/// A chunked document: its first H1 (the title) and its chunks in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunked {
    /// The text of the first level-1 heading, if any.
    pub(crate) title: Option<String>,
    /// The chunks, in document order.
    pub(crate) chunks: Vec<MarkdownChunk>,
}

/// One chunk of [`split_knowledge_file`]: its heading path (outermost
/// first) and its byte range in the file.
pub type FileChunk = (Vec<String>, Range<usize>);

/// How the index splits a knowledge file, for tools that show it (and the
/// chunker's fuzz target): the file's title, and each chunk's heading path
/// and exact byte range of `text`, in order, at about
/// [`CHUNK_TARGET_BYTES`](crate::CHUNK_TARGET_BYTES) each. `markdown`:
/// a `.md` file (ATX headings make sections); else plain text (`.txt`:
/// paragraphs only).
#[must_use]
pub fn split_knowledge_file(text: &str, markdown: bool) -> (Option<String>, Vec<FileChunk>) {
    let format = if markdown {
        Format::Markdown
    } else {
        Format::PlainText
    };
    let chunked = chunk_file(text, format, super::CHUNK_TARGET_BYTES);
    (
        chunked.title,
        chunked
            .chunks
            .into_iter()
            .map(|c| (c.heading_path, c.range))
            .collect(),
    )
}

/// Splits `text` into heading-scoped chunks of about `target_bytes` at most.
#[cfg(test)]
pub(crate) fn chunk_markdown(text: &str, target_bytes: usize) -> Chunked {
    chunk(text, target_bytes, true)
}

/// The format of a knowledge file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Markdown (`.md`): ATX headings make sections.
    Markdown,
    /// Plain text (`.txt`): paragraphs only, no headings.
    PlainText,
}

impl Format {
    /// The format of a file name, by its extension.
    pub(crate) fn of(path: &std::path::Path) -> Option<Self> {
        match path.extension().and_then(|ext| ext.to_str()) {
            Some("md") => Some(Self::Markdown),
            Some("txt") => Some(Self::PlainText),
            _ => None,
        }
    }
}

/// Chunks a knowledge file: a leading YAML front matter block (`---` to
/// `---` or `...`) is not body text, and its `title` (when present) is the
/// title; otherwise Markdown's first H1 is. Ranges stay byte ranges of the
/// whole `text`.
pub(crate) fn chunk_file(text: &str, format: Format, target_bytes: usize) -> Chunked {
    let (front_title, body_start) = front_matter(text);
    let body = &text[body_start..];
    let mut chunked = chunk(body, target_bytes, format == Format::Markdown);
    for piece in &mut chunked.chunks {
        piece.range = piece.range.start + body_start..piece.range.end + body_start;
    }
    if front_title.is_some() {
        chunked.title = front_title;
    }
    chunked
}

/// The front matter's `title` and where the body starts (0 without front
/// matter). An unclosed block is body text.
fn front_matter(text: &str) -> (Option<String>, usize) {
    let text_start = usize::from(text.starts_with('\u{FEFF}')) * '\u{FEFF}'.len_utf8();
    let mut lines = text[text_start..].split_inclusive('\n');
    let Some(first) = lines.next() else {
        return (None, 0);
    };
    if first.trim_end() != "---" {
        return (None, 0);
    }
    let mut offset = text_start + first.len();
    let mut title = None;
    for line in lines {
        offset += line.len();
        let content = line.trim_end();
        if content == "---" || content == "..." {
            return (title, offset);
        }
        if title.is_none()
            && let Some(value) = content.strip_prefix("title:")
        {
            let value = value.trim();
            let unquoted = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value)
                .trim();
            if !unquoted.is_empty() {
                title = Some(unquoted.to_owned());
            }
        }
    }
    (None, 0)
}

fn chunk(text: &str, target_bytes: usize, headings: bool) -> Chunked {
    let mut chunker = Chunker {
        text,
        target_bytes,
        stack: Vec::new(),
        blocks: Vec::new(),
        block: None,
        chunks: Vec::new(),
    };
    let mut title = None;
    let mut fence: Option<Fence> = None;
    let mut offset = 0_usize;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let content = line.trim_end_matches(['\n', '\r']);
        if headings
            && fence.is_none()
            && let Some((level, heading)) = atx_heading(content)
        {
            chunker.close_section();
            while chunker.stack.last().is_some_and(|(open, _)| *open >= level) {
                chunker.stack.pop();
            }
            if level == 1 && title.is_none() && !heading.is_empty() {
                title = Some(heading.to_owned());
            }
            chunker.stack.push((level, heading.to_owned()));
            continue;
        }
        if let Some(marker) = fence_marker(content).filter(|_| headings) {
            fence = match fence {
                None => Some(marker),
                Some(open) if marker.closes(open) => None,
                still_open => still_open,
            };
        }
        let end = start + content.len();
        if fence.is_none() && content.trim().is_empty() {
            chunker.close_block();
        } else {
            let block = chunker.block.get_or_insert(start..end);
            block.end = end;
        }
    }
    chunker.close_section();
    Chunked {
        title,
        chunks: chunker.chunks,
    }
}

struct Chunker<'a> {
    text: &'a str,
    target_bytes: usize,
    stack: Vec<(u8, String)>,
    blocks: Vec<Range<usize>>,
    block: Option<Range<usize>>,
    chunks: Vec<MarkdownChunk>,
}

impl Chunker<'_> {
    fn close_block(&mut self) {
        if let Some(block) = self.block.take() {
            self.blocks.push(block);
        }
    }

    /// Packs the section's paragraphs into chunks.
    fn close_section(&mut self) {
        self.close_block();
        let heading_path: Vec<String> = self.stack.iter().map(|(_, text)| text.clone()).collect();
        let mut current: Option<Range<usize>> = None;
        for block in std::mem::take(&mut self.blocks) {
            current = match current {
                Some(open) if block.end - open.start <= self.target_bytes => {
                    Some(open.start..block.end)
                }
                Some(open) => {
                    self.push(&heading_path, open);
                    Some(block)
                }
                None => Some(block),
            };
        }
        if let Some(open) = current {
            self.push(&heading_path, open);
        }
    }

    fn push(&mut self, heading_path: &[String], range: Range<usize>) {
        let raw = &self.text[range.clone()];
        let leading = raw.len() - raw.trim_start().len();
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return;
        }
        let start = range.start + leading;
        self.chunks.push(MarkdownChunk {
            heading_path: heading_path.to_vec(),
            range: start..start + trimmed.len(),
        });
    }
}

/// An ATX heading: its level and its text (trimmed, closing `#`s removed).
fn atx_heading(line: &str) -> Option<(u8, &str)> {
    let unindented = line.trim_start_matches(' ');
    if line.len() - unindented.len() > 3 {
        return None;
    }
    let hashes = unindented.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &unindented[hashes..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let mut heading = rest.trim();
    let without_closing = heading.trim_end_matches('#');
    if without_closing.is_empty() {
        heading = "";
    } else if without_closing.ends_with([' ', '\t']) {
        heading = without_closing.trim_end();
    }
    u8::try_from(hashes).ok().map(|level| (level, heading))
}

/// A fence line: its character, its length, and whether nothing follows it
/// (only such a line can close a fence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fence {
    marker: char,
    len: usize,
    bare: bool,
}

impl Fence {
    fn closes(self, open: Self) -> bool {
        self.bare && self.marker == open.marker && self.len >= open.len
    }
}

fn fence_marker(line: &str) -> Option<Fence> {
    let unindented = line.trim_start_matches(' ');
    if line.len() - unindented.len() > 3 {
        return None;
    }
    let marker = unindented
        .chars()
        .next()
        .filter(|c| matches!(c, '`' | '~'))?;
    let len = unindented.chars().take_while(|c| *c == marker).count();
    if len < 3 {
        return None;
    }
    Some(Fence {
        marker,
        len,
        bare: unindented[len..].trim().is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(text: &'a str, chunked: &Chunked) -> Vec<(String, &'a str)> {
        chunked
            .chunks
            .iter()
            .map(|c| (c.heading_path.join(" > "), &text[c.range.clone()]))
            .collect()
    }

    #[test]
    fn headings_make_paths() {
        let text = "intro\n\n# Title #\n\nTitle text.\n\n## A\n\nA text.\n### A1\nA1 text.\n## B\n## C ##\n  C text.  \n";
        let chunked = chunk_markdown(text, 1000);
        assert_eq!(chunked.title.as_deref(), Some("Title"));
        assert_eq!(
            texts(text, &chunked),
            vec![
                (String::new(), "intro"),
                ("Title".to_owned(), "Title text."),
                ("Title > A".to_owned(), "A text."),
                ("Title > A > A1".to_owned(), "A1 text."),
                ("Title > C".to_owned(), "C text."),
            ]
        );
    }

    #[test]
    fn fences_hide_headings_and_blank_lines() {
        let text = "# T\n\n```sh\n# not a heading\n\necho hi\n```\n\nafter\n";
        let chunked = chunk_markdown(text, 1000);
        assert_eq!(
            texts(text, &chunked),
            vec![(
                "T".to_owned(),
                "```sh\n# not a heading\n\necho hi\n```\n\nafter"
            )]
        );
        let split = chunk_markdown(text, 10);
        assert_eq!(
            texts(text, &split),
            vec![
                ("T".to_owned(), "```sh\n# not a heading\n\necho hi\n```"),
                ("T".to_owned(), "after"),
            ]
        );
    }

    #[test]
    fn not_headings() {
        assert_eq!(atx_heading("#hashtag"), None);
        assert_eq!(atx_heading("    # indented code"), None);
        assert_eq!(atx_heading("####### seven"), None);
        assert_eq!(atx_heading("   ### ok ###"), Some((3, "ok")));
        assert_eq!(atx_heading("# C#"), Some((1, "C#")));
        assert_eq!(atx_heading("#"), Some((1, "")));
    }

    #[test]
    fn paragraphs_pack_up_to_the_target() {
        let text = "# T\n\naaaa\n\nbbbb\n\ncccc\n";
        let chunked = chunk_markdown(text, 10);
        assert_eq!(
            texts(text, &chunked),
            vec![("T".to_owned(), "aaaa\n\nbbbb"), ("T".to_owned(), "cccc")]
        );
    }

    #[test]
    fn front_matter_is_not_body_and_gives_the_title() {
        let text = "---\ntitle: \"连接池耗尽\"\ntags: [db]\n---\n# H1\n\nbody text\n";
        let chunked = chunk_file(text, Format::Markdown, 1000);
        assert_eq!(chunked.title.as_deref(), Some("连接池耗尽"));
        assert_eq!(texts(text, &chunked), vec![("H1".to_owned(), "body text")]);
        let untitled = "---\ntags: [db]\n...\nbody\n";
        let chunked = chunk_file(untitled, Format::Markdown, 1000);
        assert_eq!(chunked.title, None);
        assert_eq!(texts(untitled, &chunked), vec![(String::new(), "body")]);
        let unclosed = "---\ntitle: x\nbody\n";
        let chunked = chunk_file(unclosed, Format::Markdown, 1000);
        assert_eq!(chunked.title, None);
        assert_eq!(texts(unclosed, &chunked).len(), 1);
    }

    #[test]
    fn plain_text_has_no_headings() {
        let text = "# not a heading\n\nsecond paragraph\n";
        let chunked = chunk_file(text, Format::PlainText, 10);
        assert_eq!(chunked.title, None);
        assert_eq!(
            texts(text, &chunked),
            vec![
                (String::new(), "# not a heading"),
                (String::new(), "second paragraph")
            ]
        );
    }

    #[test]
    fn crlf_and_unicode() {
        let text = "# 标题\r\n\r\n连接池 耗尽。\r\n";
        let chunked = chunk_markdown(text, 1000);
        assert_eq!(chunked.title.as_deref(), Some("标题"));
        assert_eq!(
            texts(text, &chunked),
            vec![("标题".to_owned(), "连接池 耗尽。")]
        );
    }
}
