//! Counting what a workload sends to Redis: `MONITOR` lines (client commands
//! against script-internal ones) and `INFO commandstats`.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::Ipv4Addr;
use std::time::Duration;

use super::{Outcome, TestSupportError};

/// Parses `cmdstat_<name>:calls=<n>,…` lines.
#[must_use]
pub fn parse_command_calls(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Starts counting the commands sent to the single node on `port`, by
/// `MONITOR`, until [`Monitor::finish`] returns the [`MonitorCounts`]: client
/// commands by name, and script-internal commands.
///
/// `MONITOR` shows script-internal commands as `[0 lua]`; anything else is
/// a command a client sent, that is a round trip (or part of a pipeline).
///
/// # Errors
/// When the monitor connection fails.
pub fn monitor_port(port: u16) -> Outcome<Monitor> {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .map_err(|e| TestSupportError::new(format!("monitor connect: {e}")))?;
    stream
        .write_all(b"MONITOR\r\n")
        .map_err(|e| TestSupportError::new(format!("monitor: {e}")))?;
    let mut ok = [0_u8; 5];
    stream
        .read_exact(&mut ok)
        .map_err(|e| TestSupportError::new(format!("monitor: {e}")))?;
    let reader = stream
        .try_clone()
        .map_err(|e| TestSupportError::new(format!("monitor: {e}")))?;
    let handle = std::thread::spawn(move || count_monitor_lines(reader));
    Ok(Monitor {
        stream,
        handle: Some(handle),
    })
}

/// A running `MONITOR` (see [`monitor_port`]).
#[derive(Debug)]
pub struct Monitor {
    stream: std::net::TcpStream,
    handle: Option<std::thread::JoinHandle<MonitorCounts>>,
}

/// What a [`Monitor`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonitorCounts {
    /// Commands sent by clients, by lowercase name.
    pub client: BTreeMap<String, u64>,
    /// Commands run inside scripts.
    pub script_internal: u64,
}

impl Monitor {
    /// Stops monitoring and returns the counts. Commands still in flight
    /// when it stops may be missed: wait for the work to finish first.
    #[must_use]
    pub fn finish(mut self) -> MonitorCounts {
        // Give the server a moment to flush the last monitor lines.
        std::thread::sleep(Duration::from_millis(200));
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

fn count_monitor_lines(mut stream: std::net::TcpStream) -> MonitorCounts {
    let mut counts = MonitorCounts::default();
    let mut buffer = Vec::new();
    let mut chunk = [0_u8; 64 * 1024];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\r\n") {
            let line: Vec<u8> = buffer.drain(..end + 2).collect();
            count_monitor_line(&line[..end], &mut counts);
        }
    }
    counts
}

fn count_monitor_line(line: &[u8], counts: &mut MonitorCounts) {
    // +1700000000.123456 [0 127.0.0.1:5555] "evalsha" "…" …
    let text = String::from_utf8_lossy(line);
    let Some(open) = text.find('[') else { return };
    let Some(close) = text[open..].find(']').map(|c| open + c) else {
        return;
    };
    let source = &text[open + 1..close];
    let command = text[close + 1..]
        .trim_start()
        .trim_start_matches('"')
        .split('"')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if source.ends_with(" lua") {
        counts.script_internal += 1;
    } else {
        *counts.client.entry(command).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_and_monitor_lines_parse() {
        let calls = parse_command_calls(
            "# Commandstats\r\ncmdstat_evalsha:calls=20,usec=1,usec_per_call=0.05\r\ncmdstat_config|resetstat:calls=1,usec=3\r\n",
        );
        assert_eq!(calls.get("evalsha"), Some(&20));
        assert_eq!(calls.get("config|resetstat"), Some(&1));
        let mut counts = MonitorCounts::default();
        count_monitor_line(
            br#"+1700000000.1 [0 127.0.0.1:5555] "EVALSHA" "abc" "4""#,
            &mut counts,
        );
        count_monitor_line(br#"1700000000.2 [0 lua] "hset" "k" "f""#, &mut counts);
        assert_eq!(counts.client.get("evalsha"), Some(&1));
        assert_eq!(counts.script_internal, 1);
    }
}
