//! What redaction costs `lookup_knowledge`'s projection: the bundled
//! runbooks' responses to a few on-call queries projected with the
//! boundary's redaction pass and with a disabled one (the baseline),
//! interleaved rounds, medians. Prints
//! `redaction: project_us=… unredacted_us=… share=…` with
//! `share = (project_us - unredacted_us) / project_us`. Target: `share <= 0.10`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use aci_contracts::ToolCallId;
use invocation_core::redact::{RedactionPass, Redactor};
use projectors_rag::{MarkdownKnowledgeBase, RagProjector};

const QUERIES: [&str; 4] = [
    "connection pool exhausted timeout",
    "disk pressure eviction",
    "TLS certificate expired",
    "consumer lag backlog",
];

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full { 301 } else { 5 };
    let base = MarkdownKnowledgeBase::bundled().unwrap();
    let responses: Vec<_> = QUERIES.iter().map(|q| base.search(q).unwrap()).collect();
    let projector = RagProjector::default();
    let id = ToolCallId::new("call_bench").unwrap();
    let redactor = Redactor::builtin();
    let (mut redacted, mut unredacted) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        for (query, raw) in QUERIES.iter().zip(&responses) {
            let pass = RedactionPass::new(&redactor);
            let result = projector
                .project_redacting(&id, query, black_box(raw), &pass)
                .unwrap();
            drop(black_box((result, pass.into_redactions())));
        }
        redacted.push(started.elapsed());

        let started = Instant::now();
        for (query, raw) in QUERIES.iter().zip(&responses) {
            let result = projector
                .project_redacting(&id, query, black_box(raw), &RedactionPass::disabled())
                .unwrap();
            drop(black_box(result));
        }
        unredacted.push(started.elapsed());
    }
    let (project, baseline) = (median(redacted), median(unredacted));
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "redaction: queries={} project_us={:.1} unredacted_us={:.1} share={:.3}",
        QUERIES.len(),
        us(project),
        us(baseline),
        (us(project) - us(baseline)) / us(project),
    );
}
