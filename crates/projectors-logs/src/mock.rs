//! [`MockLogSource`]: a deterministic, realistic log data set.
//!
//! The data tells one incident across the three topics, laid out relative to
//! an anchor instant ("now"):
//!
//! - **APPLICATION** (`order-service`, `api-gateway`, `payment-service`): a
//!   report job starts 56 minutes ago and leaks connections; from 52 to 2
//!   minutes ago HikariCP times out (`HikariPool-1 - Connection is not
//!   available, request timed out after 30000ms.`), order creation fails with
//!   `CannotGetJdbcConnectionException`, the pool reports `active=20, idle=0`
//!   with a growing wait queue, the gateway returns upstream `503`s and the
//!   payment service retries and gives up. Normal `GET` traffic continues.
//!   Older history: a smaller timeout burst 6 hours ago, restarts 3 hours ago,
//!   a pool start 20 hours ago, and a start 26 hours ago that no lookback
//!   reaches.
//! - **DATABASE_SLOW_QUERY**: slow log entries with `Query_time`,
//!   `Lock_time`, `Rows_sent`, `Rows_examined` and the statement: the report
//!   job's large `order_items`/`orders` join pages, `orders` lookups by
//!   `customer_id` scanning 1.8 M rows, lock waits on an `inventory` row; and
//!   older `COUNT(*)` and `audit_log` purge queries.
//! - **SYSTEM_EVENTS**: kernel OOM kills of the `java` process and kubelet
//!   `OOMKilled` restarts of `order-service` pods, disk pressure with a pod
//!   eviction and image garbage collection, a node that goes `NotReady` and
//!   reboots; older: a memory-pressure warning, a kernel panic and reboots.
//!
//! Every event carries extra fields (host, pod, trace or request ids,
//! thread, service, …) like a real source; the projector drops them.
//!
//! # Matching
//! An event matches when every whitespace-separated word of the query occurs
//! in its message, ignoring case (Unicode lowercase); words may occur in any
//! order and inside longer words (`pool` matches `HikariPool-1`). A query
//! without words matches every event. Only the message is searched.
//!
//! # Cap
//! At most [`MockLogSource::max_raw_events`] events are returned, the most
//! recent ones; `match_count` still counts all matches in the window.

use std::collections::BTreeMap;

use aci_contracts::{LogTopic, SourceKind, Timestamp};
use async_trait::async_trait;
use serde_json::Value;

use crate::file::matcher::Matcher;
use crate::{LogMatches, LogQuery, LogSource, LogSourceError, RawLogEvent};

/// A deterministic log source for tests, demos and the mock deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockLogSource {
    max_raw_events: usize,
    anchor: Option<Timestamp>,
}

impl Default for MockLogSource {
    fn default() -> Self {
        Self::new()
    }
}

impl MockLogSource {
    /// Default cap on returned raw events.
    pub const DEFAULT_MAX_RAW_EVENTS: usize = 500;

    /// A source whose data set is laid out relative to each query's end
    /// (the boundary clock's "now"), so recent events are always recent.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            max_raw_events: Self::DEFAULT_MAX_RAW_EVENTS,
            anchor: None,
        }
    }

    /// Fixes the data set to `anchor` instead: as the clock moves on, the
    /// events age and leave short windows.
    #[must_use]
    pub const fn anchored_at(mut self, anchor: Timestamp) -> Self {
        self.anchor = Some(anchor);
        self
    }

    /// Sets the cap on returned raw events (at least 1).
    #[must_use]
    pub fn with_max_raw_events(mut self, max_raw_events: usize) -> Self {
        self.max_raw_events = max_raw_events.max(1);
        self
    }

    /// The cap on returned raw events.
    #[must_use]
    pub const fn max_raw_events(&self) -> usize {
        self.max_raw_events
    }

    /// The whole data set of `topic` anchored at `now`, oldest first.
    #[must_use]
    pub fn data_set(topic: LogTopic, now: Timestamp) -> Vec<RawLogEvent> {
        let mut set = DataSet::new(now);
        match topic {
            LogTopic::Application => application(&mut set),
            LogTopic::DatabaseSlowQuery => slow_queries(&mut set),
            LogTopic::SystemEvents => system_events(&mut set),
        }
        let mut events = set.events;
        events.sort_by_key(|e| e.timestamp);
        events
    }
}

#[async_trait]
impl LogSource for MockLogSource {
    fn source_kind(&self) -> SourceKind {
        SourceKind::Mock
    }

    async fn query(&self, query: &LogQuery) -> Result<LogMatches, LogSourceError> {
        // The file source's matching rule (every word, Unicode lowercase).
        let matcher = Matcher::new(&query.query, None);
        let anchor = self.anchor.unwrap_or(query.end);
        let mut events: Vec<RawLogEvent> = Self::data_set(query.topic, anchor)
            .into_iter()
            .filter(|e| query.start <= e.timestamp && e.timestamp <= query.end)
            .filter(|e| matcher.matches(&e.message))
            .collect();
        let match_count = events.len() as u64;
        let excess = events.len().saturating_sub(self.max_raw_events);
        events.drain(..excess);
        Ok(LogMatches {
            events,
            match_count,
            stats: None,
        })
    }
}

/// Builds a data set relative to an anchor.
struct DataSet {
    now_millis: i64,
    events: Vec<RawLogEvent>,
    counter: u64,
}

impl DataSet {
    const fn new(now: Timestamp) -> Self {
        Self {
            now_millis: now.unix_millis(),
            events: Vec::new(),
            counter: 0,
        }
    }

    /// Adds an event `ago` seconds before the anchor.
    fn add(&mut self, ago: i64, level: &str, message: String, fields: &[(&str, String)]) {
        let fields: BTreeMap<String, Value> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String(v.clone())))
            .collect();
        self.events.push(RawLogEvent {
            timestamp: Timestamp::from_unix_millis(self.now_millis - ago * 1000),
            level: level.to_owned(),
            message,
            fields,
        });
    }

    /// The next deterministic pseudo-random number (SplitMix64).
    fn next(&mut self) -> u64 {
        self.counter = self.counter.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.counter;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `digits` lowercase hex digits.
    fn hex(&mut self, digits: usize) -> String {
        let mut out = String::with_capacity(digits);
        while out.len() < digits {
            out.push_str(&format!("{:016x}", self.next()));
        }
        out.truncate(digits);
        out
    }

    fn uuid(&mut self) -> String {
        let h = self.hex(32);
        format!(
            "{}-{}-4{}-a{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }

    /// A number in `low..low + span`.
    fn number(&mut self, low: u64, span: u64) -> u64 {
        low + self.next() % span.max(1)
    }
}

const ORDER_PODS: [&str; 3] = [
    "order-service-7d9f8b-x2k4q",
    "order-service-7d9f8b-m8p2z",
    "order-service-7d9f8b-q4w7n",
];
const NODES: [&str; 3] = ["ip-10-0-3-17", "ip-10-0-4-22", "ip-10-0-5-9"];
const POOL_TIMEOUT: &str = "HikariPool-1 - Connection is not available, request timed out after";

fn app_fields(
    set: &mut DataSet,
    service: &str,
    pod: &str,
    node: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("service", service.to_owned()),
        ("pod", pod.to_owned()),
        ("host", node.to_owned()),
        ("trace_id", set.hex(32)),
        ("span_id", set.hex(16)),
    ]
}

fn application(set: &mut DataSet) {
    let order = |k: usize| (ORDER_PODS[k % 3], NODES[k % 3]);

    // Older history.
    let f = app_fields(set, "order-service", ORDER_PODS[0], NODES[0]);
    set.add(
        93_600,
        "INFO",
        "Started OrderServiceApplication in 14.82 seconds (process running for 16.1)".into(),
        &f,
    );
    let f = app_fields(set, "order-service", ORDER_PODS[0], NODES[0]);
    set.add(72_000, "INFO", "HikariPool-1 - Start completed.".into(), &f);
    for (k, ago) in [22_200, 22_080, 21_960].into_iter().enumerate() {
        let (pod, node) = order(k);
        let mut f = app_fields(set, "order-service", pod, node);
        f.push(("thread", format!("http-nio-8080-exec-{}", k + 3)));
        let waited = set.number(30_000, 9);
        set.add(ago, "WARN", format!("{POOL_TIMEOUT} {waited}ms."), &f);
    }
    let f = app_fields(set, "order-service", ORDER_PODS[1], NODES[1]);
    set.add(
        21_600,
        "INFO",
        "HikariPool-1 - Pool stats (total=20, active=9, idle=11, waiting=0)".into(),
        &f,
    );
    for k in 0..3 {
        let (pod, node) = order(k);
        let f = app_fields(set, "order-service", pod, node);
        let seconds = set.number(1180, 160);
        set.add(
            10_800 - 7 * k as i64,
            "INFO",
            format!(
                "Started OrderServiceApplication in {}.{:02} seconds (process running for {}.{})",
                seconds / 100,
                seconds % 100,
                seconds / 100 + 1,
                seconds % 10
            ),
            &f,
        );
    }
    let f = app_fields(set, "api-gateway", "api-gateway-6b8c4d-tz9rw", NODES[2]);
    set.add(
        4500,
        "WARN",
        "Slow response from inventory-service: GET /api/v1/inventory/sku-44821 took 2840ms".into(),
        &f,
    );
    let f = app_fields(set, "order-service", ORDER_PODS[2], NODES[2]);
    set.add(
        3480,
        "INFO",
        "HikariPool-1 - Pool stats (total=20, active=18, idle=2, waiting=0)".into(),
        &f,
    );

    // The incident.
    let f = app_fields(set, "order-service", ORDER_PODS[0], NODES[0]);
    set.add(
        3360,
        "INFO",
        "Scheduled job ReportExportJob started (batch_size=5000, since=2025-12-01)".into(),
        &f,
    );
    for ago in [3240, 2940] {
        let mut f = app_fields(set, "order-service", ORDER_PODS[0], NODES[0]);
        f.push(("thread", "report-export-1".into()));
        let address = set.hex(8);
        set.add(
            ago,
            "WARN",
            format!(
                "Connection leak detection triggered for com.mysql.cj.jdbc.ConnectionImpl@{address} \
                 on thread report-export-1, stack trace follows"
            ),
            &f,
        );
    }
    for k in 0..26 {
        let (pod, node) = order(k);
        let mut f = app_fields(set, "order-service", pod, node);
        f.push(("thread", format!("http-nio-8080-exec-{}", k % 12 + 1)));
        let waited = set.number(30_000, 9);
        set.add(
            3120 - 120 * k as i64,
            "WARN",
            format!("{POOL_TIMEOUT} {waited}ms."),
            &f,
        );
    }
    for k in 0..13 {
        let (pod, node) = order(k + 1);
        let mut f = app_fields(set, "order-service", pod, node);
        f.push(("thread", format!("http-nio-8080-exec-{}", (k * 5) % 12 + 1)));
        let order_id = set.number(88_000, 4000);
        let waited = set.number(30_000, 9);
        set.add(
            3060 - 240 * k as i64,
            "ERROR",
            format!(
                "Failed to create order {order_id}: CannotGetJdbcConnectionException: Failed to \
                 obtain JDBC Connection; nested exception is \
                 java.sql.SQLTransientConnectionException: {POOL_TIMEOUT} {waited}ms."
            ),
            &f,
        );
    }
    for k in 0..10 {
        let (pod, node) = order(k + 2);
        let f = app_fields(set, "order-service", pod, node);
        set.add(
            3000 - 300 * k as i64,
            "WARN",
            format!(
                "HikariPool-1 - Pool stats (total=20, active=20, idle=0, waiting={})",
                12 + 3 * k
            ),
            &f,
        );
    }
    for k in 0..8 {
        let mut f = app_fields(set, "api-gateway", "api-gateway-6b8c4d-tz9rw", NODES[2]);
        let request_id = set.uuid();
        f.push(("request_id", request_id.clone()));
        let latency = set.number(30_010, 40);
        set.add(
            2700 - 330 * k as i64,
            "ERROR",
            format!(
                "Upstream order-service returned 503 Service Unavailable for POST /api/v1/orders \
                 (request_id={request_id}, latency={latency}ms)"
            ),
            &f,
        );
    }
    for k in 0..6 {
        let f = app_fields(
            set,
            "payment-service",
            "payment-service-59f7c8-kq2mv",
            NODES[1],
        );
        let order_id = set.number(88_000, 4000);
        let attempt = k % 2 + 1;
        set.add(
            2580 - 400 * k as i64,
            "WARN",
            format!(
                "Retrying POST http://order-service:8080/api/v1/orders/{order_id}/confirm after \
                 503 Service Unavailable (attempt {attempt}/3, backoff {}ms)",
                200 << (attempt - 1)
            ),
            &f,
        );
    }
    for ago in [1500, 420] {
        let f = app_fields(
            set,
            "payment-service",
            "payment-service-59f7c8-kq2mv",
            NODES[1],
        );
        let order_id = set.number(88_000, 4000);
        set.add(
            ago,
            "ERROR",
            format!(
                "Giving up on POST http://order-service:8080/api/v1/orders/{order_id}/confirm \
                 after 3 attempts: 503 Service Unavailable"
            ),
            &f,
        );
    }
    for k in 0..10 {
        let (pod, node) = order(k);
        let f = app_fields(set, "order-service", pod, node);
        let order_id = set.number(80_000, 8000);
        let millis = set.number(12, 1800);
        set.add(
            3300 - 310 * k as i64,
            "INFO",
            format!("GET /api/v1/orders/{order_id} 200 {millis}ms"),
            &f,
        );
    }
    // The gateway times out the order calls stuck waiting for a connection.
    for k in 0..9 {
        let f = app_fields(set, "api-gateway", "api-gateway-6b8c4d-tz9rw", NODES[2]);
        let waited = set.number(30_000, 40);
        set.add(
            3090 - 330 * k as i64,
            "ERROR",
            format!(
                "upstream request timeout: POST /api/v1/orders -> order-service:8080 \
                 returned 504 Gateway Timeout after {waited}ms"
            ),
            &f,
        );
    }
}

fn db_fields(set: &mut DataSet, user: &str, client: &str) -> Vec<(&'static str, String)> {
    let thread = set.number(4000, 2000);
    vec![
        ("db", "orders".to_owned()),
        ("user", user.to_owned()),
        ("client_host", client.to_owned()),
        ("server_host", "mariadb-orders-0".to_owned()),
        ("thread_id", thread.to_string()),
    ]
}

fn slow_queries(set: &mut DataSet) {
    let f = db_fields(set, "maintenance", "10.0.5.9");
    set.add(
        79_200,
        "",
        "Query_time: 31.207s Lock_time: 0.004s Rows_sent: 0 Rows_examined: 2210448 DELETE FROM \
         audit_log WHERE created_at < '2025-12-01 00:00:00' LIMIT 10000"
            .into(),
        &f,
    );
    for ago in [10_800, 10_200] {
        let f = db_fields(set, "order_svc", "10.0.3.21");
        let centis = set.number(380, 60);
        set.add(
            ago,
            "notice",
            format!(
                "Query_time: {}.{:02}s Lock_time: 0.001s Rows_sent: 1 Rows_examined: 912044 \
                 SELECT COUNT(*) FROM orders WHERE status = 'PENDING'",
                centis / 100,
                centis % 100
            ),
            &f,
        );
    }
    for k in 0..6_u64 {
        let f = db_fields(set, "report_export", "10.0.3.17");
        let millis = set.number(280_000, 60_000);
        let examined = 9_120_044 + 5000 * k;
        set.add(
            3300 - 480 * k as i64,
            "error",
            format!(
                "Query_time: {}.{:03}s Lock_time: 0.002s Rows_sent: 5000 Rows_examined: \
                 {examined} SELECT oi.*, o.customer_id FROM order_items oi JOIN orders o ON o.id \
                 = oi.order_id WHERE o.created_at >= '2025-12-01' ORDER BY oi.id LIMIT 5000 \
                 OFFSET {}",
                millis / 1000,
                millis % 1000,
                45_000 + 5000 * k
            ),
            &f,
        );
    }
    for k in 0..12 {
        let f = db_fields(
            set,
            "order_svc",
            ["10.0.3.21", "10.0.4.22", "10.0.5.9"][k % 3],
        );
        let millis = set.number(8000, 5000);
        let customer = set.number(1000, 9000);
        let examined = set.number(1_834_000, 500);
        set.add(
            3000 - 230 * k as i64,
            "warning",
            format!(
                "Query_time: {}.{:03}s Lock_time: 0.000s Rows_sent: 20 Rows_examined: \
                 {examined} SELECT o.* FROM orders o WHERE o.customer_id = {customer} ORDER BY \
                 o.created_at DESC LIMIT 20",
                millis / 1000,
                millis % 1000
            ),
            &f,
        );
    }
    for k in 0..5 {
        let f = db_fields(set, "inventory_svc", "10.0.4.22");
        let lock = set.number(50_000, 1000);
        set.add(
            2400 - 420 * k as i64,
            "warning",
            format!(
                "Query_time: {}.{:03}s Lock_time: {}.{:03}s Rows_sent: 0 Rows_examined: 1 UPDATE \
                 inventory SET reserved = reserved + 1 WHERE sku = 'sku-44821'",
                (lock + 5) / 1000,
                (lock + 5) % 1000,
                lock / 1000,
                lock % 1000
            ),
            &f,
        );
    }
}

fn sys_fields(node: &str, unit: &str) -> Vec<(&'static str, String)> {
    vec![
        ("host", node.to_owned()),
        ("unit", unit.to_owned()),
        ("cluster", "prod-eu-1".to_owned()),
    ]
}

fn system_events(set: &mut DataSet) {
    let boot_id = set.uuid();
    set.add(
        93_600,
        "info",
        format!("Node ip-10-0-5-9 rebooted (boot_id {boot_id})"),
        &sys_fields(NODES[2], "systemd"),
    );
    set.add(
        72_000,
        "crit",
        "Kernel panic - not syncing: Out of memory and no killable processes".into(),
        &sys_fields(NODES[2], "kernel"),
    );
    let boot_id = set.uuid();
    set.add(
        71_880,
        "info",
        format!("Node ip-10-0-5-9 rebooted after kernel panic (boot_id {boot_id})"),
        &sys_fields(NODES[2], "systemd"),
    );
    set.add(
        32_400,
        "err",
        "Memory cgroup out of memory: Killed process 7120 (python3) total-vm:2048000kB, \
         anon-rss:1048576kB, file-rss:2048kB, shmem-rss:0kB, UID:1000 pgtables:4112kB \
         oom_score_adj:999"
            .into(),
        &sys_fields(NODES[1], "kernel"),
    );
    let boot_id = set.uuid();
    set.add(
        14_400,
        "info",
        format!("Node ip-10-0-5-9 rebooted for kernel update 6.1.0-28 (boot_id {boot_id})"),
        &sys_fields(NODES[2], "systemd"),
    );
    set.add(
        4200,
        "warning",
        "Node ip-10-0-3-17 condition MemoryPressure is now True: memory.available 412Mi \
         (threshold 500Mi)"
            .into(),
        &sys_fields(NODES[0], "kubelet"),
    );

    // The incident.
    for (k, (ago, pod, node, restarts)) in [
        (3120, ORDER_PODS[0], NODES[0], 3),
        (2100, ORDER_PODS[1], NODES[1], 1),
        (1080, ORDER_PODS[0], NODES[0], 4),
    ]
    .into_iter()
    .enumerate()
    {
        let pid = set.number(20_000, 9000);
        let rss = 4_194_304 + 1024 * k;
        set.add(
            ago,
            "err",
            format!(
                "Memory cgroup out of memory: Killed process {pid} (java) total-vm:8123456kB, \
                 anon-rss:{rss}kB, file-rss:10240kB, shmem-rss:0kB, UID:1000 pgtables:9120kB \
                 oom_score_adj:937"
            ),
            &sys_fields(node, "kernel"),
        );
        let mut f = sys_fields(node, "kubelet");
        f.push(("pod", pod.to_owned()));
        f.push(("namespace", "orders".to_owned()));
        set.add(
            ago - 5,
            "warning",
            format!(
                "Container order-service in pod orders/{pod} was OOMKilled (exit code 137); \
                 restarting (restart count {restarts})"
            ),
            &f,
        );
    }
    for k in 0..5 {
        let pod = ORDER_PODS[k % 3];
        let mut f = sys_fields(NODES[k % 3], "kubelet");
        f.push(("pod", pod.to_owned()));
        f.push(("namespace", "orders".to_owned()));
        let ip = set.number(2, 250);
        set.add(
            2880 - 540 * k as i64,
            "warning",
            format!(
                "Liveness probe failed for pod orders/{pod}: Get \"http://10.244.{}.{ip}:8080/actuator/health\": \
                 context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                k % 3 + 1
            ),
            &f,
        );
    }
    set.add(
        2640,
        "warning",
        "Node ip-10-0-3-17 condition DiskPressure is now True: nodefs.available 4.2% \
         (threshold 10%)"
            .into(),
        &sys_fields(NODES[0], "kubelet"),
    );
    let mut f = sys_fields(NODES[0], "kubelet");
    f.push(("pod", "report-export-5c6d7e-h2j9k".to_owned()));
    f.push(("namespace", "orders".to_owned()));
    set.add(
        2580,
        "warning",
        "Evicting pod orders/report-export-5c6d7e-h2j9k: ephemeral-storage usage 18.4Gi \
         exceeds the limit 10Gi (DiskPressure)"
            .into(),
        &f,
    );
    set.add(
        2460,
        "info",
        "Image garbage collection freed 3.1GiB on node ip-10-0-3-17".into(),
        &sys_fields(NODES[0], "kubelet"),
    );
    set.add(
        1800,
        "info",
        "Node ip-10-0-3-17 condition DiskPressure is now False: nodefs.available 17.9%".into(),
        &sys_fields(NODES[0], "kubelet"),
    );
    set.add(
        720,
        "error",
        "Node ip-10-0-4-22 NotReady: kubelet stopped posting node status (last heartbeat 40s \
         ago)"
            .into(),
        &sys_fields(NODES[1], "node-controller"),
    );
    let boot_id = set.uuid();
    set.add(
        540,
        "info",
        format!("Node ip-10-0-4-22 rebooted (boot_id {boot_id})"),
        &sys_fields(NODES[1], "systemd"),
    );
    set.add(
        420,
        "info",
        "Node ip-10-0-4-22 condition Ready is now True".into(),
        &sys_fields(NODES[1], "kubelet"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_unix_millis(1_767_225_600_000)
    }

    fn run(source: &MockLogSource, topic: LogTopic, query: &str, minutes: i64) -> LogMatches {
        let end = now();
        let start = Timestamp::from_unix_millis(end.unix_millis() - minutes * 60_000);
        let query = LogQuery {
            topic,
            query: query.into(),
            start,
            end,
        };
        block_on(source.query(&query))
    }

    fn block_on<F: std::future::Future<Output = Result<LogMatches, LogSourceError>>>(
        f: F,
    ) -> LogMatches {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
            .unwrap()
    }

    #[test]
    fn data_set_is_deterministic_and_sorted() {
        for topic in LogTopic::ALL {
            let a = MockLogSource::data_set(topic, now());
            assert_eq!(a, MockLogSource::data_set(topic, now()));
            assert!(a.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
            assert!(a.len() >= 20, "{topic:?}");
        }
    }

    #[test]
    fn recent_events_in_the_last_hour_older_ones_need_a_longer_lookback() {
        let source = MockLogSource::new();
        let hour = run(
            &source,
            LogTopic::Application,
            "Connection is not available",
            60,
        );
        assert_eq!(hour.match_count, 39);
        let day = run(
            &source,
            LogTopic::Application,
            "connection is NOT available",
            1440,
        );
        assert_eq!(day.match_count, 42);
        let started = run(
            &source,
            LogTopic::Application,
            "started orderserviceapplication",
            1440,
        );
        assert_eq!(
            started.match_count, 3,
            "the 26 h old start is out of every window"
        );
        assert_eq!(
            run(&source, LogTopic::SystemEvents, "oom", 60).match_count,
            6
        );
        assert_eq!(
            run(&source, LogTopic::SystemEvents, "kernel panic", 60).match_count,
            0
        );
        assert_eq!(
            run(&source, LogTopic::SystemEvents, "kernel panic", 1440).match_count,
            2
        );
        assert!(
            run(
                &source,
                LogTopic::DatabaseSlowQuery,
                "orders customer_id",
                60
            )
            .match_count
                >= 12
        );
        assert_eq!(
            run(&source, LogTopic::Application, "kafka rebalance", 1440).match_count,
            0
        );
    }

    #[test]
    fn cap_keeps_the_most_recent_and_counts_all() {
        let source = MockLogSource::new().with_max_raw_events(5);
        let all = run(
            &MockLogSource::new(),
            LogTopic::Application,
            "timed out",
            60,
        );
        let capped = run(&source, LogTopic::Application, "timed out", 60);
        assert_eq!(capped.match_count, all.match_count);
        assert_eq!(capped.events.len(), 5);
        assert_eq!(capped.events[..], all.events[all.events.len() - 5..]);
    }

    #[test]
    fn anchored_data_ages() {
        let anchor = Timestamp::from_unix_millis(now().unix_millis() - 2 * 3_600_000);
        let source = MockLogSource::new().anchored_at(anchor);
        assert_eq!(
            run(&source, LogTopic::SystemEvents, "oom", 60).match_count,
            0
        );
        assert_eq!(
            run(&source, LogTopic::SystemEvents, "oom", 180).match_count,
            6
        );
    }
}
