//! Retrieval quality on a labeled query set: recall@1, recall@5 and mean
//! reciprocal rank, per language.
//!
//! A labeled query names the document and the heading (the last segment of
//! the heading path; the title for text before the first subheading) a person
//! would expect. A search result is a hit when both match. The set used by
//! the tests and by `cargo xtask bench knowledge` is
//! `tests/data/labeled_queries.json`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::{Legs, MarkdownKnowledgeBase, Result};

/// One labeled query.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct LabeledQuery {
    /// `en`, `zh`, `mixed`, ...
    pub language: String,
    /// The query as a person would type it.
    pub query: String,
    /// The expected document.
    pub document_id: String,
    /// The expected section: the last heading of its path.
    pub heading: String,
}

impl LabeledQuery {
    /// Parses a JSON array of labeled queries.
    ///
    /// # Errors
    /// The JSON error when `json` is not such an array.
    pub fn parse_set(json: &str) -> serde_json::Result<Vec<Self>> {
        serde_json::from_str(json)
    }
}

/// Scores of one language.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct Scores {
    /// Queries scored.
    pub queries: usize,
    /// Share of queries whose expected section ranks first.
    pub recall_at_1: f64,
    /// Share of queries whose expected section is in the top 5.
    pub recall_at_5: f64,
    /// Mean of 1/rank of the expected section (0 when not in the top 5).
    pub mrr: f64,
}

/// One query's outcome: the rank of the expected section (1-based), if found
/// in the top 5.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueryOutcome {
    /// The query.
    pub query: LabeledQuery,
    /// Rank of the expected section in the top 5.
    pub rank: Option<usize>,
}

/// Runs every query against `base` (its top 5) and scores them per language.
///
/// # Errors
/// A search error of `base`.
pub fn evaluate(
    base: &MarkdownKnowledgeBase,
    queries: &[LabeledQuery],
) -> Result<(BTreeMap<String, Scores>, Vec<QueryOutcome>)> {
    let base = base.clone().with_top_k(5);
    score(queries, |query, _| base.search(&query.query))
}

/// [`evaluate`] with the given retrieval `legs`; `vectors[i]` is the vector
/// of `queries[i]` (from
/// [`MarkdownKnowledgeBase::embed_query`]), `None` where it has none.
///
/// # Errors
/// A search error of `base`.
pub fn evaluate_legs(
    base: &MarkdownKnowledgeBase,
    queries: &[LabeledQuery],
    legs: Legs,
    vectors: &[Option<Vec<f32>>],
) -> Result<(BTreeMap<String, Scores>, Vec<QueryOutcome>)> {
    let base = base.clone().with_top_k(5);
    score(queries, |query, at| {
        let vector = vectors.get(at).and_then(Option::as_deref);
        base.search_legs(&query.query, legs, vector)
    })
}

fn score(
    queries: &[LabeledQuery],
    mut search: impl FnMut(&LabeledQuery, usize) -> Result<Value>,
) -> Result<(BTreeMap<String, Scores>, Vec<QueryOutcome>)> {
    let mut outcomes = Vec::with_capacity(queries.len());
    for (at, query) in queries.iter().enumerate() {
        let response = search(query, at)?;
        let rank = response["documents"]
            .as_array()
            .into_iter()
            .flatten()
            .position(|hit| is_expected(hit, query))
            .map(|at| at + 1);
        outcomes.push(QueryOutcome {
            query: query.clone(),
            rank,
        });
    }
    let mut scores: BTreeMap<String, Scores> = BTreeMap::new();
    for outcome in &outcomes {
        let entry = scores.entry(outcome.query.language.clone()).or_default();
        entry.queries += 1;
        if outcome.rank == Some(1) {
            entry.recall_at_1 += 1.0;
        }
        if let Some(rank) = outcome.rank {
            entry.recall_at_5 += 1.0;
            #[allow(clippy::cast_precision_loss)] // rank <= 5
            let reciprocal = 1.0 / rank as f64;
            entry.mrr += reciprocal;
        }
    }
    for entry in scores.values_mut() {
        #[allow(clippy::cast_precision_loss)] // a few hundred queries
        let n = entry.queries.max(1) as f64;
        entry.recall_at_1 /= n;
        entry.recall_at_5 /= n;
        entry.mrr /= n;
    }
    Ok((scores, outcomes))
}

fn is_expected(hit: &Value, query: &LabeledQuery) -> bool {
    if hit["document_id"] != query.document_id.as_str() {
        return false;
    }
    let section = hit["heading_path"]
        .as_array()
        .and_then(|path| path.last())
        .and_then(Value::as_str)
        .or_else(|| hit["title"].as_str());
    section == Some(query.heading.as_str())
}
