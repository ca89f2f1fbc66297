//! The review page as one self-contained HTML document (maud templates):
//! inline CSS, a few lines of inline script (a timeline bar opens its
//! call; the offline citation check), no external resource of any kind.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::{Value, json};

use super::citations::CitationReport;
use super::json_view;
use super::model::{CallView, Mark, Outcome, RunView, Source};

/// Where the page will be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Served by `aci serve --http`: the citation check posts to the server.
    Served,
    /// A file written by `aci report`: the citation check runs in the page,
    /// over the verdicts written into it.
    Offline,
}

/// The page's style: readable at 1280 px and on a phone, outcomes by colour
/// and by word (colour is never the only sign).
const STYLE: &str = r#"
:root{--evidence:#1a7f37;--no-evidence:#8a6d00;--error:#c62828;--projecting:#6e7781;--cut:#fde2e1;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);margin:0;padding:1rem;max-width:1400px;margin-inline:auto}
h1{font-size:1.3rem;margin:.2rem 0 .8rem;word-break:break-all}
h2{font-size:1.1rem;margin:1.4rem 0 .5rem;border-bottom:1px solid var(--line)}
code,pre{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;word-break:break-all}
.badge{display:inline-block;padding:0 .4rem;border-radius:.6rem;font-size:.8rem;color:#fff;white-space:nowrap}
.badge.evidence{background:var(--evidence)}.badge.no-evidence{background:var(--no-evidence)}.badge.error{background:var(--error)}.badge.projecting{background:var(--projecting)}
.axis{display:flex;justify-content:space-between;color:var(--muted);font-size:.8rem}
ol.timeline{list-style:none;margin:0;padding:0;border-left:1px solid var(--line);border-right:1px solid var(--line)}
ol.timeline li{position:relative;height:1.3rem;border-bottom:1px dotted var(--line)}
ol.timeline a.bar{position:absolute;top:.25rem;height:.8rem;min-width:4px;border-radius:2px;display:block}
ol.timeline a.bar.evidence{background:var(--evidence)}ol.timeline a.bar.no-evidence{background:var(--no-evidence)}ol.timeline a.bar.error{background:var(--error)}ol.timeline a.bar.projecting{background:var(--projecting)}
ol.timeline a.bar.refused{background:var(--error);opacity:.55}
ol.timeline a.bar.mark{width:10px!important;height:10px;transform:translateX(-5px) rotate(45deg);border-radius:0}
ol.timeline .label{position:absolute;top:0;font-size:.75rem;line-height:1.3rem;color:var(--muted);white-space:nowrap}
ol.timeline a.bar:focus{outline:3px solid #0969da;outline-offset:1px}
details.call{border:1px solid var(--line);border-radius:6px;margin:.4rem 0}
details.call>summary{cursor:pointer;padding:.4rem .6rem;display:flex;flex-wrap:wrap;gap:.2rem .8rem;align-items:center}
details.call>summary:focus-visible{outline:3px solid #0969da}
details.call .body{padding:.4rem .8rem .8rem;border-top:1px solid var(--line)}
.views{display:grid;grid-template-columns:1fr 1fr;gap:.8rem}
.views section{min-width:0}
.views h3{font-size:.95rem;margin:.6rem 0 .3rem}
pre{background:#f6f8fa;border:1px solid var(--line);border-radius:4px;padding:.5rem;overflow:auto;max-height:32rem;margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
.cut{background:var(--cut);text-decoration:line-through;text-decoration-color:#c62828}
.redacted-source{background:#fff3c4}
ul.bounded{margin:.4rem 0;padding-left:1.2rem;color:#8c1d18}
.meaning{color:var(--muted)}
textarea{width:100%;min-height:7rem;font:inherit}
form.sign-out{margin:.4rem 0 0}
ul.citations li{margin:.2rem 0}
ul.citations li.stands{color:var(--evidence)}ul.citations li.negative{color:var(--no-evidence)}
ul.citations li.not-citable,ul.citations li.unknown,ul.citations li.other-run{color:var(--error)}
@media (max-width:760px){.views{grid-template-columns:1fr}body{padding:.5rem}dl.facts{grid-template-columns:1fr}}
"#;

/// The offline citation check: the extraction rules of
/// [`super::citations::extract`], over the verdicts of the run's calls
/// written into the page (`#verdicts`).
pub(crate) const OFFLINE_SCRIPT: &str = r#"
(function(){
var data=JSON.parse(document.getElementById('verdicts').textContent);
var form=document.getElementById('citation-form');
var idRe=/^[A-Za-z0-9_.:-]+$/;
function isCitation(t){var p=t.split('/');if(p.length>2)return false;return p.every(function(x){return idRe.test(x)});}
function extract(answer){
 var found=[];function push(c){if(c&&found.indexOf(c)<0)found.push(c);}
 var re=/\[([^\]]*)\]/g,m;
 while((m=re.exec(answer))){var parts=m[1].split(/[,; \t\n]/).filter(function(p){return p.length>0});
  if(parts.every(isCitation))parts.forEach(push);}
 answer.split(/[^A-Za-z0-9_.:-]+/).forEach(function(w){w=w.replace(/[.:]+$/,'');if(Object.prototype.hasOwnProperty.call(data.calls,w))push(w);});
 return found;}
function mark(c){var i=c.indexOf('/');
 if(i>=0){if(c.slice(0,i)!==data.run)return 'other-run';c=c.slice(i+1);}
 return Object.prototype.hasOwnProperty.call(data.calls,c)?data.calls[c]:'unknown';}
function item(list,cls,mark,text){var li=document.createElement('li');li.className=cls;if(mark)li.setAttribute('data-mark',mark);li.textContent=text;list.appendChild(li);}
form.addEventListener('submit',function(e){e.preventDefault();
 var answer=document.getElementById('answer').value,cited=document.getElementById('cited'),uncited=document.getElementById('uncited');
 cited.textContent='';uncited.textContent='';var seen={};
 extract(answer).forEach(function(c){var k=mark(c);item(cited,'cite '+k,k,c+' \u2014 '+data.labels[k]);
  if(k!=='unknown'&&k!=='other-run')seen[c.slice(c.indexOf('/')+1)]=true;});
 data.order.forEach(function(id){if(!seen[id])item(uncited,'uncited',null,id);});
 document.getElementById('citation-results').hidden=false;});
})();
"#;

/// A bar of the timeline (a link to its call) opens the call it names.
const OPEN_TARGET_SCRIPT: &str = "function openTarget(){var t=document.getElementById(location.hash.slice(1));if(t&&t.tagName==='DETAILS'){t.open=true;}}addEventListener('hashchange',openTarget);openTarget();";

/// The whole page of `view`, with the result of a citation check when one
/// was posted.
pub(crate) fn render(view: &RunView, mode: Mode, citations: Option<&CitationReport>) -> String {
    let title = format!("Run {}", view.run_id);
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; form-action 'self'";
                meta name="referrer" content="no-referrer";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { "Run " code { (view.run_id) } }
                    (header(view))
                    @if mode == Mode::Served {
                        form.sign-out method="post" action="/logout" { button type="submit" { "Sign out" } }
                    }
                }
                main {
                    h2 id="timeline-title" { "Timeline" }
                    (timeline(view))
                    h2 { "Calls (" (view.calls.len()) ")" }
                    @if view.calls.is_empty() {
                        p id="no-calls" { "No records: unknown run, or its records expired." }
                    }
                    @for (n, call) in view.calls.iter().enumerate() { (call_details(n, call)) }
                    h2 { "Refused before running (" (view.refusals.len()) ")" }
                    (refusals(view))
                    h2 { "Citation check" }
                    (citation_form(view, mode, citations))
                }
                script { (PreEscaped(OPEN_TARGET_SCRIPT)) }
            }
        }
    };
    page.into_string()
}

fn header(view: &RunView) -> Markup {
    let state = view.state.as_ref();
    let span = view.span();
    let used = view.calls.len();
    html! {
        dl.facts id="run-header" {
            dt { "Source" } dd id="source" data-source=(source_name(view.source)) {
                @match view.source {
                    Source::Store => "read from the live store (records live for the configured record TTL)",
                    Source::Archive => "read from the archive: the store no longer holds the run (raw responses as the archive's raw policy kept them)",
                }
            }
            dt { "Owner" } dd id="owner" { (view.owner().unwrap_or("-")) }
            dt { "Started" } dd { (state.map_or_else(|| "-".to_owned(), |s| s.started_at.to_string())) }
            dt { "First call" } dd { (span.map_or_else(|| "-".to_owned(), |s| s.0.to_string())) }
            dt { "Last call" } dd { (span.map_or_else(|| "-".to_owned(), |s| s.1.to_string())) }
            dt { "Deadline" } dd { (state.and_then(|s| s.deadline).map_or_else(|| "none".to_owned(), |d| d.to_string())) }
            dt { "Budget" } dd id="budget" {
                (used) " call(s) used"
                @if let Some(budget) = view.budget { " of " (budget) } @else { " (no budget)" }
            }
            dt { "By status" } dd id="by-status" {
                @for (status, n) in view.count_by_status() { span { (status) " " (n) } " " }
            }
            dt { "By outcome" } dd id="by-outcome" {
                @for (name, n) in view.count_by_outcome() { span { (name) " " (n) } " " }
            }
        }
    }
}

/// The source's machine name (`data-source`).
const fn source_name(source: Source) -> &'static str {
    match source {
        Source::Store => "store",
        Source::Archive => "archive",
    }
}

fn timeline(view: &RunView) -> Markup {
    let Some((first, last)) = view.span() else {
        return html! { p { "No calls." } };
    };
    let start = first.unix_millis();
    let total = (last.unix_millis() - start).max(1) as f64;
    let percent = |ms: i64| (ms as f64 / total * 100.0).clamp(0.0, 100.0);
    html! {
        div.axis aria-hidden="true" {
            span { (first) } span { "+" (format_ms(total as u64)) " \u{2192} " (last) }
        }
        ol.timeline aria-labelledby="timeline-title" {
            @for (n, call) in view.calls.iter().enumerate() {
                @let outcome = call.outcome();
                @let left = percent(call.record.created_at.unix_millis() - start);
                @let ms = call.duration_ms();
                @let width = ms.map_or(0.0, |d| percent(d as i64));
                @let mark = ms == Some(0);
                @let label = format!("{} {} {} {}", call.record.tool_name, call.id(), outcome_label(call), ms.map_or_else(|| "unfinished".to_owned(), format_ms));
                li {
                    a class={ "bar " (outcome.class()) @if mark { " mark" } }
                        href={ "#call-" (n) }
                        data-tool-call-id=(call.id())
                        data-start-ms=(call.record.created_at.unix_millis())
                        title=(label) aria-label=(label)
                        style=(format!("left:{left:.3}%;width:{width:.3}%")) {}
                    // The id beside its bar, on the side with room.
                    @let beside = if left + width < 60.0 {
                        format!("left:calc({:.3}% + 8px)", left + width)
                    } else {
                        format!("right:calc({:.3}% + 8px)", 100.0 - left)
                    };
                    span.label aria-hidden="true" style=(beside) { (call.id()) " \u{b7} " (call.record.tool_name) }
                }
            }
            @for (n, refusal) in view.refusals.iter().enumerate() {
                @let left = percent(refusal.at.unix_millis() - start);
                @let id = refusal.tool_call_id.as_ref().map_or("(no valid id)", |id| id.as_str());
                @let label = format!("refused {} {} {}", refusal.tool_name.as_deref().unwrap_or("(unknown tool)"), id, refusal.error_code.as_str());
                li.refused {
                    a.bar.refused.mark href={ "#refused-" (n) }
                        data-code=(refusal.error_code.as_str())
                        data-tool-call-id=[refusal.tool_call_id.as_ref().map(|id| id.as_str())]
                        title=(label) aria-label=(label)
                        style=(format!("left:{left:.3}%;width:0%")) {}
                    @let beside = if left < 60.0 {
                        format!("left:calc({left:.3}% + 8px)")
                    } else {
                        format!("right:calc({:.3}% + 8px)", 100.0 - left)
                    };
                    span.label aria-hidden="true" style=(beside) { "refused \u{b7} " (refusal.error_code.as_str()) }
                }
            }
        }
    }
}

/// The calls refused before they had a record: when, which id and tool, why.
fn refusals(view: &RunView) -> Markup {
    html! {
        @if view.source == super::model::Source::Archive {
            p.meaning { "Refusals are kept in the store only (for the record TTL); the archive has none." }
        } @else if view.refusals.is_empty() {
            p.meaning { "None." }
        } @else {
            ol.refusals {
                @for (n, refusal) in view.refusals.iter().enumerate() {
                    li id={ "refused-" (n) } data-code=(refusal.error_code.as_str()) {
                        (refusal.at) " \u{b7} "
                        code { (refusal.tool_call_id.as_ref().map_or("(no valid id)", |id| id.as_str())) }
                        " \u{b7} " (refusal.tool_name.as_deref().unwrap_or("(unknown tool)"))
                        " \u{b7} " span.badge.error { (refusal.error_code.as_str()) }
                        " " span.meaning { (refusal.error_code.message()) }
                    }
                }
            }
        }
    }
}

fn outcome_label(call: &CallView) -> String {
    match (call.outcome(), call.error_code()) {
        (_, Some(code)) => format!("ERROR {code}"),
        (Outcome::Evidence, None) => "EVIDENCE_FOUND".to_owned(),
        (Outcome::NoEvidence, None) => "NO_EVIDENCE".to_owned(),
        (Outcome::Error, None) => "ERROR".to_owned(),
        (Outcome::Projecting, None) => "PROJECTING".to_owned(),
    }
}

fn format_ms(ms: u64) -> String {
    if ms >= 10_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// A phase's duration: microseconds below a millisecond, else milliseconds.
fn format_us(d: std::time::Duration) -> String {
    let us = d.as_micros();
    if us < 1000 {
        format!("{us} \u{b5}s")
    } else {
        format!("{:.1} ms", us as f64 / 1000.0)
    }
}

fn call_details(n: usize, call: &CallView) -> Markup {
    let outcome = call.outcome();
    let observation = call.observation();
    let raw = call.raw();
    let bounded = call.bounded();
    let record = &call.record;
    html! {
        details.call id={ "call-" (n) } data-tool-call-id=(call.id()) data-outcome=(outcome.class()) {
            summary {
                span.badge.(outcome.class()) { (outcome_label(call)) }
                code { (record.tool_name) }
                code.id { (call.id()) }
                span { (record.created_at) }
                span { (call.duration_ms().map_or_else(|| "unfinished".to_owned(), format_ms)) }
                @if !bounded.is_empty() { span.badge.error { "bounded" } }
            }
            div.body {
                dl.facts {
                    dt { "Tool" } dd { code { (record.tool_name) } }
                    dt { "tool_call_id" } dd { code { (call.id()) } }
                    dt { "Created" } dd { (record.created_at) }
                    dt { "Finished" } dd { (record.finished_at.map_or_else(|| "-".to_owned(), |t| t.to_string())) }
                    dt { "Sizes" } dd.sizes {
                        "request " (record.request_bytes) " B, raw "
                        (record.raw_bytes.map_or_else(|| "-".to_owned(), |b| format!("{b} B")))
                        ", model's result "
                        (record.agent_result_bytes.map_or_else(|| "-".to_owned(), |b| format!("{b} B")))
                    }
                    dt { "Duration" } dd.durations {
                        (call.duration_ms().map_or_else(|| "-".to_owned(), format_ms)) " in all"
                        @if let Some(t) = &record.timings {
                            ": " span.phase data-phase="preflight" { "preflight " (format_us(t.preflight)) }
                            ", " span.phase data-phase="execution" { "execution " (t.execution.map_or_else(|| "not run".to_owned(), format_us)) }
                            ", " span.phase data-phase="projection" { "projection " (t.projection.map_or_else(|| "not reached".to_owned(), format_us)) }
                        }
                    }
                    @if let Some(code) = call.error_code() {
                        dt { "Error" } dd.error-code { code { (code) } " " span.meaning { (code.message()) } }
                        @if let Some(retryable) = record.retryable {
                            dt { "Retryable" } dd { (if retryable { "yes" } else { "no" }) }
                        }
                    }
                    @if let Some(from) = &record.replayed_from {
                        dt { "Replayed from" } dd { code { (from) } }
                    }
                    dt { "Arguments" } dd { pre.arguments { (call.arguments().map_or_else(String::new, |a| pretty(&a))) } }
                }
                @if !bounded.is_empty() {
                    h3 { "What the model did not get" }
                    ul.bounded {
                        @for note in &bounded { li { (note) } }
                    }
                }
                div.views {
                    section.model-view {
                        h3 { "Model observation" }
                        @match &observation {
                            Some(o) => pre.observation { (pretty(o)) },
                            None => p { "Nothing yet: the call has not finished." },
                        }
                    }
                    section.raw-view {
                        h3 {
                            "Raw response (harness only)"
                            @if let Some(mode) = &call.raw_mode { " \u{2014} as archived (" (mode) ")" }
                        }
                        @match &raw {
                            Some(r) => pre.raw { (PreEscaped(json_view::render(r, observation.as_ref().filter(|_| call.error_code().is_none())))) },
                            None => p { "No raw response was kept." },
                        }
                    }
                }
            }
        }
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn citation_form(view: &RunView, mode: Mode, citations: Option<&CitationReport>) -> Markup {
    let action = format!("/runs/{}/citations", view.run_id);
    html! {
        p {
            "Paste the agent's answer. Cited ids are " code { "[ID]" } " or " code { "[RUN/ID]" }
            " in brackets, or any word that is a tool call id of this run; each gets "
            code { "aci verify" } "'s verdict."
        }
        @let served = mode == Mode::Served;
        form id="citation-form" method=[served.then_some("post")] action=[served.then_some(&action)] {
            label for="answer" { "Answer text" }
            textarea id="answer" name="answer" {}
            button type="submit" { "Check citations" }
        }
        div id="citation-results" hidden[citations.is_none()] {
            h3 { "Cited" }
            ul.citations id="cited" {
                @if let Some(report) = citations {
                    @for checked in &report.cited {
                        @let mark = checked.mark();
                        li class={ "cite " (mark.class()) } data-mark=(mark.class()) {
                            (checked.citation) " \u{2014} " (mark.label())
                        }
                    }
                }
            }
            h3 { "Calls of this run the answer does not cite" }
            ul.citations id="uncited" {
                @if let Some(report) = citations {
                    @for id in &report.uncited { li.uncited { (id) } }
                }
            }
        }
        @if mode == Mode::Offline {
            script type="application/json" id="verdicts" { (PreEscaped(verdicts_json(view))) }
            script { (PreEscaped(OFFLINE_SCRIPT)) }
        }
    }
}

/// The run's verdicts for the offline script, safe inside `<script>`.
fn verdicts_json(view: &RunView) -> String {
    let calls: BTreeMap<&str, &str> = view
        .verdicts
        .iter()
        .map(|(id, verdict)| (id.as_str(), Mark::of(verdict).class()))
        .collect();
    let labels: BTreeMap<&str, &str> = [
        Mark::Stands,
        Mark::Negative,
        Mark::Error,
        Mark::Unknown,
        Mark::OtherRun,
    ]
    .into_iter()
    .map(|m| (m.class(), m.label()))
    .collect();
    let order: Vec<&str> = view.calls.iter().map(CallView::id).collect();
    let data =
        json!({"run": view.run_id.as_str(), "calls": calls, "labels": labels, "order": order});
    // `</script>` and `<!--` cannot occur once every `<` is escaped.
    data.to_string().replace('<', "\\u003c")
}
