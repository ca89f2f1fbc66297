//! The citation check of an answer text against one run.
//!
//! What counts as a citation in free text: every bracketed id, `[ID]` or
//! `[RUN/ID]` (several in one pair of brackets separated by commas, spaces
//! or semicolons), and every word that is exactly the tool call id of one of
//! the run's calls. Each citation gets the verdict `aci verify` gives it
//! ([`Journal::verify_citations`](invocation_core::Journal::verify_citations),
//! and for a run read from the archive the archived calls' verdicts);
//! the run's calls the answer does not cite are listed apart.
//!
//! The offline page repeats the extraction in its inline script
//! ([`super::page::OFFLINE_SCRIPT`]) over the verdicts written into the
//! page; a test keeps the two in step.

use std::collections::BTreeSet;

use aci_contracts::is_id_byte;
use invocation_core::{CitationVerdict, ToolBoundary};

use super::model::{Mark, RunView, Source};

/// One citation found in the answer, and its mark.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Checked {
    /// The citation as written.
    pub(crate) citation: String,
    /// Its verdict under `aci verify`'s rules.
    pub(crate) verdict: CitationVerdict,
}

impl Checked {
    /// The page's mark of the verdict.
    pub(crate) const fn mark(&self) -> Mark {
        Mark::of(&self.verdict)
    }
}

/// The answer's citations with their verdicts, and the calls it leaves uncited.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CitationReport {
    /// Each distinct citation, in the order of first appearance.
    pub(crate) cited: Vec<Checked>,
    /// The run's call ids the answer does not cite, in time order.
    pub(crate) uncited: Vec<String>,
}

/// The citations of `answer`: bracketed ids, and bare words that are ids of
/// `known` calls; each once, in the order of first appearance.
pub(crate) fn extract<'a>(answer: &'a str, known: &BTreeSet<&str>) -> Vec<&'a str> {
    let mut found: Vec<&'a str> = Vec::new();
    let mut push = |citation: &'a str| {
        if !citation.is_empty() && !found.contains(&citation) {
            found.push(citation);
        }
    };
    let mut rest = answer;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        // A bracket of ids only: `[see the logs]` cites nothing.
        let parts: Vec<&str> = after[..close]
            .split([',', ';', ' ', '\t', '\n'])
            .filter(|p| !p.is_empty())
            .collect();
        if parts.iter().all(|p| is_citation(p)) {
            parts.into_iter().for_each(&mut push);
        }
        rest = &after[close + 1..];
    }
    for word in answer.split(|c: char| !(c.is_ascii() && is_id_byte(c as u8))) {
        // Sentence punctuation after an id is not part of it.
        let word = word.trim_end_matches(['.', ':']);
        if known.contains(word) {
            push(word);
        }
    }
    found
}

/// An id, or `run/id`, by the identifier rule.
fn is_citation(text: &str) -> bool {
    let id_like = |t: &str| !t.is_empty() && t.bytes().all(is_id_byte);
    match text.split_once('/') {
        Some((run, id)) => id_like(run) && id_like(id),
        None => id_like(text),
    }
}

/// Checks the citations of `answer` against `view`'s run with the store's
/// journal, as `aci verify` does; for a run read from the archive, the
/// citations the store no longer knows are judged on the archived calls,
/// as `aci verify` judges them ([`crate::archive::recheck_archived`]).
pub(crate) async fn check(boundary: &ToolBoundary, view: &RunView, answer: &str) -> CitationReport {
    let known: BTreeSet<&str> = view.calls.iter().map(|c| c.id()).collect();
    let citations = extract(answer, &known);
    let mut verdicts = boundary
        .journal()
        .verify_citations(&view.run_id, &citations)
        .await;
    if view.source == Source::Archive {
        crate::archive::recheck_archived(&view.archived, &mut verdicts);
    }
    report(view, verdicts.into_iter().map(|c| (c.citation, c.verdict)))
}

/// The report of checked citations: the calls of `view` that none of them
/// names are the uncited ones.
fn report(
    view: &RunView,
    checked: impl Iterator<Item = (String, CitationVerdict)>,
) -> CitationReport {
    let cited: Vec<Checked> = checked
        .map(|(citation, verdict)| Checked { citation, verdict })
        .collect();
    let cited_ids: BTreeSet<&str> = cited
        .iter()
        .filter(|c| !matches!(c.mark(), Mark::OtherRun | Mark::Unknown))
        .map(|c| c.citation.rsplit('/').next().unwrap_or(&c.citation))
        .collect();
    let uncited = view
        .calls
        .iter()
        .map(|c| c.id())
        .filter(|id| !cited_ids.contains(id))
        .map(str::to_owned)
        .collect();
    CitationReport { cited, uncited }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracketed_ids_and_known_bare_words_are_citations() {
        let known: BTreeSet<&str> = ["call_a", "call_b"].into_iter().collect();
        let answer = "The pool ran out [call_a, call_x]. See call_b. \
                      Also [run-9/call_a] and [not an id!] and call_c.";
        assert_eq!(
            extract(answer, &known),
            ["call_a", "call_x", "run-9/call_a", "call_b"]
        );
        assert!(extract("nothing cited here", &known).is_empty());
        assert_eq!(extract("[call_b][call_b] call_b", &known), ["call_b"]);
    }
}
