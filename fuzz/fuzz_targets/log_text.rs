//! Any bytes as a log file in every format `query_logs` reads: the whole-text
//! parser never panics and makes at most one event per line, and the file
//! search (prefilter-guided, seeking or reading whole) finds exactly the
//! events that reading every event and matching it finds when the lines are
//! in time order (within the seeking's slack), and never more otherwise.
#![no_main]

use aci_contracts::{LogTopic, Timestamp};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use projectors_logs::{FileLogSource, LogFormat, LogQuery, LogsConfig, TopicConfig, parse_text};

const FORMATS: [LogFormat; 12] = [
    LogFormat::JsonLines,
    LogFormat::Logfmt,
    LogFormat::Syslog,
    LogFormat::MysqlSlow,
    LogFormat::Pattern,
    LogFormat::SpringBoot,
    LogFormat::Postgresql,
    LogFormat::Redis,
    LogFormat::NginxError,
    LogFormat::MariadbError,
    LogFormat::Klog,
    LogFormat::Cri,
];
const WORDS: [&str; 6] = ["timeout", "pool", "é", "caused", "error", "a"];
/// 2026-01-01T00:00:00Z: the search's "now".
const NOW_MILLIS: i64 = 1_767_225_600_000;

fuzz_target!(|data: &[u8]| {
    let [format, word, lookback, text @ ..] = data else {
        return;
    };
    let index = usize::from(*format) % FORMATS.len();
    let (section, sources) = &prepared()[index];
    let end = Timestamp::from_unix_millis(NOW_MILLIS);
    let Ok(parsed) = parse_text(section, text, end) else {
        return;
    };
    let lines = text.split(|b| *b == b'\n').count();
    assert!(parsed.events.len() <= lines, "more events than lines");
    if FORMATS[index] == LogFormat::MysqlSlow {
        // The slow log is read whole, never searched by time.
        return;
    }

    let query = LogQuery {
        topic: LogTopic::Application,
        query: WORDS[usize::from(*word) % WORDS.len()].to_owned(),
        start: Timestamp::from_unix_millis(NOW_MILLIS - (i64::from(*lookback) + 1) * 3_600_000),
        end,
    };
    // The search returns its matches in time order (ties in file order).
    // It matches an event's whole text; an event whose message was cut for
    // the raw record (`message_truncated`) may match past the cut, so one
    // that does not match before it is only a possible match.
    let (mut sure, unmatched): (Vec<_>, Vec<_>) = parsed
        .events
        .iter()
        .filter(|e| query.start <= e.timestamp && e.timestamp <= query.end)
        .partition(|e| e.message.to_lowercase().contains(&query.query));
    sure.sort_by_key(|e| e.timestamp);
    let sure: Vec<&str> = sure.iter().map(|e| e.message.as_str()).collect();
    let maybe: Vec<&str> = unmatched
        .iter()
        .filter(|e| e.fields.contains_key("message_truncated"))
        .map(|e| e.message.as_str())
        .collect();
    // The guided search relies on lines in time order within the slack the
    // seeking tolerates; a file out of order beyond it may be skipped or cut
    // where no probe sees the disorder (a documented limit). Then the search
    // still finds nothing that reading every event does not.
    // Order is judged per line (each line parsed on its own), so a
    // continuation carrying its own time (a CRI partial) counts too.
    let line_times: Vec<i64> = text
        .split(|b| *b == b'\n')
        .filter_map(|line| parse_text(section, line, end).ok())
        .flat_map(|one| one.events.into_iter().map(|e| e.timestamp.unix_millis()))
        .collect();
    let in_order = line_times
        .windows(2)
        .all(|pair| pair[1] >= pair[0] - FileLogSource::ORDER_SLACK_MS);
    std::fs::write(section.dir.join(FILE), text).expect("write the file");
    for source in sources {
        let (matches, _) = source
            .query_blocking(&query)
            .expect("a search of a readable file");
        let found: Vec<&str> = matches.events.iter().map(|e| e.message.as_str()).collect();
        let count = usize::try_from(matches.match_count).expect("a count of events in memory");
        if in_order && maybe.is_empty() {
            assert_eq!(count, sure.len());
            assert_eq!(found[..], sure[sure.len() - found.len()..]);
        } else {
            assert!(count <= sure.len() + maybe.len());
            assert!(!in_order || count >= sure.len());
            assert!(found.iter().all(|m| sure.contains(m) || maybe.contains(m)));
        }
    }
});

const FILE: &str = "app.log";

/// Per format: its section and two sources over one file of a directory of
/// this process's own, one seeking on every file, one reading them whole.
/// Built once: compiling the presets is not what is fuzzed here.
fn prepared() -> &'static [(TopicConfig, [FileLogSource; 2])] {
    static PREPARED: OnceLock<Vec<(TopicConfig, [FileLogSource; 2])>> = OnceLock::new();
    PREPARED.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("aci-fuzz-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the directory");
        FORMATS
            .iter()
            .map(|&format| {
                let section = TopicConfig {
                    dir: dir.clone(),
                    files: vec![FILE.to_owned()],
                    format,
                    pattern: (format == LogFormat::Pattern).then(|| {
                        r"^(?P<timestamp>\S+) (?P<level>[A-Z]+) (?P<message>.*)$".to_owned()
                    }),
                    time_key: None,
                    level_key: None,
                    message_key: None,
                    timestamp: None,
                    time_zone: None,
                };
                let config = LogsConfig {
                    topics: [(LogTopic::Application, section.clone())]
                        .into_iter()
                        .collect(),
                    max_raw_events: None,
                };
                let source = || FileLogSource::new(&config).expect("a valid section");
                let sources = [
                    source().with_seek_threshold(0),
                    source().with_seek_threshold(u64::MAX),
                ];
                (section, sources)
            })
            .collect()
    })
}
