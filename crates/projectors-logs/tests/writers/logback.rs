//! `spring_boot`: a small Java program compiled here (`javac`) that logs
//! through SLF4J and logback (Debian's `liblogback-java`) with Spring Boot's
//! default file pattern, and throws exceptions with `Caused by:` chains,
//! written the way Spring Boot writes them (`%wEx`: the trace after an empty
//! line).

use std::path::Path;
use std::process::Command;

use projectors_logs::LogFormat;

use super::check::{copytruncate, count_level, matches, parsed, topic};
use super::process::{next_second_after, now_ms, program, run};

const JARS: [&str; 3] = ["slf4j-api.jar", "logback-core.jar", "logback-classic.jar"];

/// Spring Boot 3's `FILE_LOG_PATTERN`, with its defaults filled in
/// (`LOG_DATEFORMAT_PATTERN`, `LOG_LEVEL_PATTERN`, `PID`, `%wEx`).
const LOGBACK_XML: &str = r#"<configuration>
  <conversionRule conversionWord="wEx" converterClass="WhitespaceThrowableProxyConverter"/>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${LOG_FILE}</file>
    <append>true</append>
    <encoder>
      <pattern>%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX} %5p ${PID:- } --- [%t] %-40.40logger{39} : %m%n%wEx</pattern>
    </encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"#;

/// As Spring Boot's converter of the same name: the stack trace between
/// two line separators.
const CONVERTER: &str = r#"
import ch.qos.logback.classic.pattern.ExtendedThrowableProxyConverter;
import ch.qos.logback.classic.spi.IThrowableProxy;
import ch.qos.logback.core.CoreConstants;

public class WhitespaceThrowableProxyConverter extends ExtendedThrowableProxyConverter {
    @Override
    protected String throwableProxyToString(IThrowableProxy tp) {
        return CoreConstants.LINE_SEPARATOR + super.throwableProxyToString(tp) + CoreConstants.LINE_SEPARATOR;
    }
}
"#;

/// Logs `args[0]` requests; every fifth fails with a chain of three
/// exceptions whose root cause is a pool timeout.
const APP: &str = r#"
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public class OrderService {
    private static final Logger log = LoggerFactory.getLogger("com.example.order.PaymentClient");

    static void pool(int id) throws java.sql.SQLException {
        throw new java.sql.SQLTransientConnectionException(
            "HikariPool-1 - Connection is not available, request timed out after 30000ms.");
    }

    static void pay(int id) {
        try {
            pool(id);
        } catch (java.sql.SQLException e) {
            throw new IllegalStateException("could not reserve stock for order " + id,
                new RuntimeException("payment-service call failed", e));
        }
    }

    public static void main(String[] args) {
        int n = Integer.parseInt(args[0]);
        for (int i = 0; i < n; i++) {
            if (i % 5 == 0) {
                try {
                    pay(i);
                } catch (RuntimeException e) {
                    log.error("Order {} failed", i, e);
                }
            } else if (i % 7 == 0) {
                log.warn("Order {} retried", i);
            } else {
                log.info("GET /api/orders/{} 200", i);
            }
        }
    }
}
"#;

fn classpath(extra: &Path) -> String {
    let mut parts = vec![extra.display().to_string()];
    for jar in JARS {
        let path = Path::new("/usr/share/java").join(jar);
        assert!(
            path.is_file(),
            "{} is missing: this test runs logback (apt-get install liblogback-java libslf4j-java; .ci/run installs them)",
            path.display()
        );
        parts.push(path.display().to_string());
    }
    parts.join(":")
}

fn write(log: &Path, classes: &Path, events: u32) {
    let java = program("java", &[], "default-jdk-headless");
    run(Command::new(java)
        .arg("-cp")
        .arg(classpath(classes))
        .arg(format!("-DLOG_FILE={}", log.display()))
        .arg("-DPID=4242")
        .arg(format!(
            "-Dlogback.configurationFile={}",
            classes.join("logback.xml").display()
        ))
        .args(["-Xshare:auto", "-XX:TieredStopAtLevel=1", "OrderService"])
        .arg(events.to_string())
        .env("TZ", "UTC"));
}

#[test]
fn spring_boot_stack_traces_from_logback() {
    let javac = program("javac", &[], "default-jdk-headless");
    let dir = tempfile::Builder::new()
        .prefix("aci-logback-")
        .tempdir()
        .unwrap();
    let classes = dir.path().join("classes");
    std::fs::create_dir(&classes).unwrap();
    std::fs::write(classes.join("OrderService.java"), APP).unwrap();
    std::fs::write(
        classes.join("WhitespaceThrowableProxyConverter.java"),
        CONVERTER,
    )
    .unwrap();
    std::fs::write(classes.join("logback.xml"), LOGBACK_XML).unwrap();
    run(Command::new(javac)
        .arg("-cp")
        .arg(classpath(&classes))
        .arg("-d")
        .arg(&classes)
        .arg(classes.join("OrderService.java"))
        .arg(classes.join("WhitespaceThrowableProxyConverter.java")));
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let log = logs.join("app.log");
    let section = topic(&logs, "app.log*", LogFormat::SpringBoot);
    let started = now_ms() - 60_000;
    // The program exits when it has written every event.
    write(&log, &classes, 50);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches(" ERROR 4242 --- [main] ").count(),
        10,
        "{text}"
    );
    assert_eq!(text.matches("Caused by: ").count(), 20);

    let all = parsed(&section, &log);
    assert_eq!(all.unparsed + all.orphan_lines, 0);
    assert_eq!(
        all.events.len(),
        50,
        "one event per log call, stack traces included"
    );
    assert_eq!(count_level(&all.events, "ERROR"), 10);
    assert_eq!(count_level(&all.events, "WARN"), 6);
    let end = now_ms() + 60_000;
    // Words only in the root cause, two `Caused by:` down.
    let (found, _) = matches(
        &section,
        "Connection is not available SQLTransientConnectionException",
        started,
        end,
    );
    assert_eq!(found.len(), 10);
    let first = &found[0];
    assert_eq!(first.level, "ERROR");
    assert_eq!(first.fields["pid"], "4242");
    assert_eq!(first.fields["thread"], "main");
    assert_eq!(first.fields["logger"], "com.example.order.PaymentClient");
    assert!(first.message.starts_with("Order 0 failed\njava.lang.IllegalStateException: could not reserve stock for order 0\n\tat OrderService.pay"), "{:?}", first.message);
    assert!(
        first
            .message
            .contains("\nCaused by: java.lang.RuntimeException: payment-service call failed")
    );
    // The words of a continuation line and of the head, together.
    let (found, _) = matches(&section, "order 45 failed hikaripool-1", started, end);
    assert_eq!(found.len(), 1);
    let (found, _) = matches(&section, "GET 200", started, end);
    assert_eq!(found.len(), 50 - 10 - 6);

    copytruncate(&log, &log.with_file_name("app.log.1.gz"));
    let rotated_at = now_ms();
    next_second_after(rotated_at);
    write(&log, &classes, 10);
    let (first, _) = matches(&section, "not available", started, rotated_at);
    let (second, _) = matches(
        &section,
        "not available",
        (rotated_at / 1000 + 1) * 1000,
        now_ms() + 60_000,
    );
    let (both, _) = matches(&section, "not available", started, now_ms() + 60_000);
    assert_eq!((first.len(), second.len(), both.len()), (10, 2, 12));
}
