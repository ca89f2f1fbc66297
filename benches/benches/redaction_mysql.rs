//! What redaction costs `query_mysql`'s projection: a full result (100 rows
//! of ids, amounts, dates, text, JSON and binary cells, some holding
//! credentials) projected with the boundary's redaction pass and with a
//! disabled one (the baseline), interleaved rounds, medians. Prints
//! `redaction: project_us=… unredacted_us=… share=…` with
//! `share = (project_us - unredacted_us) / project_us`. Target: `share <= 0.10`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use aci_contracts::ToolCallId;
use invocation_core::redact::{RedactionPass, Redactor};
use projectors_mysql::{MysqlProjector, RawCell, RawColumn, RawColumnKind, RawResultSet};

fn raw() -> RawResultSet {
    let columns = vec![
        RawColumn::new("id", RawColumnKind::UnsignedInteger),
        RawColumn::new("customer", RawColumnKind::Text),
        RawColumn::new("amount", RawColumnKind::Decimal),
        RawColumn::new("status", RawColumnKind::Text),
        RawColumn::new("note", RawColumnKind::Text),
        RawColumn::new("payload", RawColumnKind::Json),
        RawColumn::new("blob", RawColumnKind::Binary),
        RawColumn::new("attempts", RawColumnKind::Integer),
    ];
    let rows = (0..100_u64)
        .map(|i| {
            let note = if i % 10 == 0 {
                format!("retry via https://svc:pw{i}x9Q@api.internal/v1/orders/{i} failed")
            } else {
                format!("order {i} for customer {} timed out after 30000ms in HikariPool-1", i * 7)
            };
            vec![
                RawCell::UInt(i),
                RawCell::Text(format!("customer-{i}@example.com")),
                RawCell::Decimal(format!("{i}.50")),
                RawCell::Text(if i % 3 == 0 { "FAILED" } else { "PAID" }.to_owned()),
                RawCell::Text(note),
                RawCell::Json(format!(
                    r#"{{"order_id": {i}, "items": [{{"sku": "A-{i}", "qty": 2}}], "gateway": "stripe", "region": "eu-west-1"}}"#
                )),
                RawCell::Bytes(format!("trace-{i:08x}").into_bytes()),
                RawCell::Int(i64::try_from(i % 5).unwrap()),
            ]
        })
        .collect();
    RawResultSet {
        columns,
        rows,
        more_rows: false,
        values_shortened: false,
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full { 301 } else { 5 };
    let raw = raw();
    let projector = MysqlProjector::default();
    let id = ToolCallId::new("call_bench").unwrap();
    let redactor = Redactor::builtin();
    let (mut redacted, mut unredacted) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let pass = RedactionPass::new(&redactor);
        let result = projector
            .project_redacting(&id, black_box(&raw), &pass)
            .unwrap();
        redacted.push(started.elapsed());
        drop(black_box((result, pass.into_redactions())));

        let started = Instant::now();
        let result = projector
            .project_redacting(&id, black_box(&raw), &RedactionPass::disabled())
            .unwrap();
        unredacted.push(started.elapsed());
        drop(black_box(result));
    }
    let (project, baseline) = (median(redacted), median(unredacted));
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "redaction: rows={} project_us={:.1} unredacted_us={:.1} share={:.3}",
        raw.rows.len(),
        us(project),
        us(baseline),
        (us(project) - us(baseline)) / us(project),
    );
}
