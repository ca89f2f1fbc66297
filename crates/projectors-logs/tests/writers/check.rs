//! What every writer's test checks of the log it wrote: counts and levels
//! through the source, the window (seeking equals reading whole), rotation.

use std::io::Write as _;
use std::path::Path;

use aci_contracts::{LogTopic, Timestamp};
use flate2::Compression;
use flate2::write::GzEncoder;
use projectors_logs::{
    FileLogSource, LogFormat, LogQuery, LogsConfig, ParsedText, RawLogEvent, ScanStats,
    TopicConfig, parse_text,
};

pub(crate) fn topic(dir: &Path, files: &str, format: LogFormat) -> TopicConfig {
    TopicConfig {
        dir: dir.to_owned(),
        files: vec![files.to_owned()],
        format,
        pattern: None,
        time_key: None,
        level_key: None,
        message_key: None,
        timestamp: None,
        time_zone: Some("UTC".into()),
    }
}

/// The source over `section`, reading files whole or (threshold 0)
/// searching every file for the window.
pub(crate) fn source(section: &TopicConfig, seek_threshold: u64) -> FileLogSource {
    FileLogSource::new(&LogsConfig {
        topics: [(LogTopic::Application, section.clone())]
            .into_iter()
            .collect(),
        max_raw_events: Some(1000),
    })
    .unwrap()
    .with_seek_threshold(seek_threshold)
}

/// The matches of `words` in `[start_ms, end_ms]`, after checking that the
/// window search (every file searched by seeking) finds the same.
pub(crate) fn matches(
    section: &TopicConfig,
    words: &str,
    start_ms: i64,
    end_ms: i64,
) -> (Vec<RawLogEvent>, ScanStats) {
    let query = LogQuery {
        topic: LogTopic::Application,
        query: words.to_owned(),
        start: Timestamp::from_unix_millis(start_ms),
        end: Timestamp::from_unix_millis(end_ms),
    };
    let (whole, stats) = source(section, u64::MAX).query_blocking(&query).unwrap();
    let (seeking, _) = source(section, 0).query_blocking(&query).unwrap();
    assert_eq!(
        whole.match_count,
        whole.events.len() as u64,
        "under the cap"
    );
    assert_eq!(
        whole.events, seeking.events,
        "seeking finds what reading whole finds: {words:?}"
    );
    assert_eq!(whole.match_count, seeking.match_count);
    (whole.events, stats)
}

/// Every event of the file, as the format reads it. With
/// `ACI_KEEP_WRITER_LOGS=<dir>` the file is also copied there (to look at
/// what the real writer wrote).
pub(crate) fn parsed(section: &TopicConfig, path: &Path) -> ParsedText {
    let text = std::fs::read(path).unwrap();
    if let Some(keep) = std::env::var_os("ACI_KEEP_WRITER_LOGS") {
        let name = format!("{:?}.log", section.format).to_lowercase();
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::write(Path::new(&keep).join(name), &text).unwrap();
    }
    let reference = Timestamp::from_unix_millis(super::process::now_ms() + 60_000);
    parse_text(section, &text, reference).unwrap()
}

/// logrotate's `copytruncate` with compression: the file's content moves
/// to `rotated` (gzip), the file is emptied in place (the writer keeps
/// appending to it).
pub(crate) fn copytruncate(path: &Path, rotated: &Path) {
    let text = std::fs::read(path).unwrap();
    let mut encoder = GzEncoder::new(std::fs::File::create(rotated).unwrap(), Compression::fast());
    encoder.write_all(&text).unwrap();
    encoder.finish().unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(0)
        .unwrap();
}

/// How many events have `level`.
pub(crate) fn count_level(events: &[RawLogEvent], level: &str) -> usize {
    events.iter().filter(|e| e.level == level).count()
}
