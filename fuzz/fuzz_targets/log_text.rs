//! Any bytes as a log file in every format `query_logs` reads: the whole-text
//! parser never panics and makes at most one event per line, and the file
//! search (prefilter-guided, seeking or reading whole) finds exactly the
//! events that reading every event and matching it finds.
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
    let expected: Vec<&str> = parsed
        .events
        .iter()
        .filter(|e| query.start <= e.timestamp && e.timestamp <= query.end)
        .filter(|e| e.message.to_lowercase().contains(&query.query))
        .map(|e| e.message.as_str())
        .collect();
    std::fs::write(section.dir.join(FILE), text).expect("write the file");
    for source in sources {
        let (matches, _) = source
            .query_blocking(&query)
            .expect("a search of a readable file");
        assert_eq!(matches.match_count, expected.len() as u64);
        let found: Vec<&str> = matches.events.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(found[..], expected[expected.len() - found.len()..]);
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
