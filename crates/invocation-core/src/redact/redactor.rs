//! The compiled rules and the redaction pass.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, LazyLock};

use regex::{Regex, RegexBuilder, RegexSet};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::{RedactionError, RuleSpec};
use super::filter::KeywordFilter;
use super::rules::{BUILTIN_RULES, KV_SECRET, NON_SECRET_SHAPES, SECRET_KEY_NAME};
use super::scanner::KeywordScanner;

/// What every marker starts with: `<redacted:RULE>`.
pub const MARKER_PREFIX: &str = "<redacted:";

/// The marker that replaces a secret found by `rule`: `<redacted:RULE>`.
#[must_use]
pub fn marker(rule: &str) -> String {
    format!("{MARKER_PREFIX}{rule}>")
}

/// How many secrets each rule replaced: rule name to count, never the values.
/// Serializes as a JSON object (`{"kv_secret": 2, "url_password": 1}`),
/// names in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Redactions(BTreeMap<String, u32>);

impl Redactions {
    /// No redactions.
    #[must_use]
    pub const fn new() -> Self {
        Self(BTreeMap::new())
    }

    /// Adds `count` to `rule`'s count (saturating).
    pub fn add(&mut self, rule: &str, count: u32) {
        if count == 0 {
            return;
        }
        if let Some(n) = self.0.get_mut(rule) {
            *n = n.saturating_add(count);
        } else {
            self.0.insert(rule.to_owned(), count);
        }
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Self) {
        for (rule, &count) in &other.0 {
            self.add(rule, count);
        }
    }

    /// `rule`'s count (0 when it never matched).
    #[must_use]
    pub fn get(&self, rule: &str) -> u32 {
        self.0.get(rule).copied().unwrap_or(0)
    }

    /// The sum of all counts.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.0.values().map(|&n| u64::from(n)).sum()
    }

    /// True when nothing was redacted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Rule names and counts, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        self.0.iter().map(|(rule, &n)| (rule.as_str(), n))
    }

    /// The counts as a map.
    #[must_use]
    pub const fn as_map(&self) -> &BTreeMap<String, u32> {
        &self.0
    }

    /// The counts as a map.
    #[must_use]
    pub fn into_map(self) -> BTreeMap<String, u32> {
        self.0
    }
}

impl From<Redactions> for BTreeMap<String, u32> {
    fn from(redactions: Redactions) -> Self {
        redactions.0
    }
}

/// True when `bytes` holds a `\u` (a JSON unicode escape, or text that
/// looks like one). A search for the backslash alone: `memmem::find` would
/// build a searcher on every call, which costs more than the search over the
/// short texts most cells hold.
fn holds_unicode_escape(bytes: &[u8]) -> bool {
    memchr::memchr_iter(b'\\', bytes).any(|at| bytes.get(at + 1) == Some(&b'u'))
}

/// One compiled rule.
struct Rule {
    name: Box<str>,
    marker: Box<str>,
    regex: Regex,
    secret_group: usize,
    /// Lowercase; empty means tried on every text.
    keywords: Box<[Box<str>]>,
    /// The keywords as written, when they only count in that case.
    exact_keywords: Option<Box<[Box<str>]>>,
}

/// A secret found in a text: byte range and the rule (index) that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hit {
    start: usize,
    end: usize,
    rule: usize,
}

/// The redaction engine. Two automata over every rule's keywords (each
/// ASCII case-insensitive or case-sensitive, as its rule says): the first
/// tells whether a text can hold any keyword, the second, in one scan of a
/// text that can, which rules' keywords it holds; only those rules' own
/// regexes then run, for positions.
/// Rules without keywords (a rules file may have some) are found by one
/// [`RegexSet`] over them, scanned on every text. See the [module
/// docs](crate::redact) for the rules and the guarantees.
///
/// Cheap to share (`Arc`); `Send + Sync`.
pub struct Redactor {
    rules: Vec<Rule>,
    /// The first look: can a text hold any keyword at all?
    filter: KeywordFilter,
    /// The second: whose keywords does it hold? Tags are rule indices.
    scanner: KeywordScanner,
    /// The rules without keywords, and the automaton over them.
    unkeyed: Option<(Vec<usize>, RegexSet)>,
    non_secret: RegexSet,
    allow: HashSet<Box<str>>,
    secret_key: Regex,
    kv_secret: usize,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field(
                "rules",
                &self.rules.iter().map(|r| &*r.name).collect::<Vec<_>>(),
            )
            .field("allow", &self.allow.len())
            .finish_non_exhaustive()
    }
}

static BUILTIN: LazyLock<Arc<Redactor>> = LazyLock::new(|| {
    Arc::new(
        Redactor::new(&[], std::iter::empty::<String>())
            .unwrap_or_else(|e| unreachable!("the built-in rules compile (tested): {e}")),
    )
});

impl Redactor {
    /// The built-in rules, no extra rules, no allowlist; compiled once per
    /// process.
    #[must_use]
    pub fn builtin() -> Arc<Self> {
        Arc::clone(&BUILTIN)
    }

    /// The built-in rules followed by `extra` rules (lower priority on
    /// ties), with `allow`: literal values that are never redacted.
    ///
    /// # Errors
    /// [`RedactionError`] naming the first rule whose name is not lowercase
    /// `[a-z0-9_]{1,64}` or is taken, whose regex does not compile or can
    /// match the empty string, whose secret group does not exist or can be
    /// empty, or whose keyword is empty; an empty allowlist value; rules too
    /// large together for one automaton.
    pub fn new<I, S>(extra: &[RuleSpec], allow: I) -> Result<Self, RedactionError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let builtin = BUILTIN_RULES.iter().map(|r| {
            (
                r.name,
                r.regex,
                Some(r.secret_group),
                r.keywords.iter().map(|k| (*k).to_owned()).collect(),
                r.case_sensitive_keywords,
            )
        });
        let extra = extra.iter().map(|r| {
            (
                r.name.as_str(),
                r.regex.as_str(),
                r.secret_group,
                r.keywords.clone(),
                r.case_sensitive_keywords,
            )
        });
        let mut rules: Vec<Rule> = Vec::new();
        let mut names = HashSet::new();
        for (name, pattern, secret_group, keywords, exact) in builtin.chain(extra) {
            let rule = compile_rule(name, pattern, secret_group, keywords, exact)?;
            if !names.insert(rule.name.clone()) {
                return Err(RedactionError::DuplicateName {
                    rule: name.to_owned(),
                });
            }
            rules.push(rule);
        }
        let too_large = |e: &dyn fmt::Display| RedactionError::TooLarge {
            reason: first_line(&e.to_string()),
        };
        // Each rule's keywords, as written when they count only in that
        // case, tagged with the rule's index.
        let keywords: Vec<(&str, bool, u32)> = rules
            .iter()
            .enumerate()
            .flat_map(|(index, rule)| {
                let exact = rule.exact_keywords.as_deref();
                let tag = u32::try_from(index).unwrap_or(u32::MAX);
                exact
                    .unwrap_or(&rule.keywords)
                    .iter()
                    .map(move |k| (&**k, exact.is_some(), tag))
            })
            .collect();
        let filter = KeywordFilter::new(keywords.iter().map(|&(k, exact, _)| (k, exact)));
        let scanner = KeywordScanner::new(keywords.iter().copied());
        let unkeyed: Vec<usize> = (0..rules.len())
            .filter(|&i| rules[i].keywords.is_empty())
            .collect();
        let unkeyed = if unkeyed.is_empty() {
            None
        } else {
            let set = RegexSet::new(unkeyed.iter().map(|&i| rules[i].regex.as_str()))
                .map_err(|e| too_large(&e))?;
            Some((unkeyed, set))
        };
        let non_secret = RegexSet::new(NON_SECRET_SHAPES).map_err(|e| too_large(&e))?;
        let secret_key = Regex::new(SECRET_KEY_NAME).map_err(|e| too_large(&e))?;
        let mut allowed = HashSet::new();
        for value in allow {
            let value: String = value.into();
            if value.is_empty() {
                return Err(RedactionError::EmptyAllowValue);
            }
            allowed.insert(value.into_boxed_str());
        }
        let kv_secret = rules
            .iter()
            .position(|r| &*r.name == KV_SECRET)
            .unwrap_or_else(|| unreachable!("kv_secret is a built-in rule"));
        Ok(Self {
            rules,
            filter,
            scanner,
            unkeyed,
            non_secret,
            allow: allowed,
            secret_key,
            kv_secret,
        })
    }

    /// The rule names, in priority order.
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| &*r.name)
    }

    /// `text` with every secret replaced by `<redacted:RULE>`; borrowed,
    /// without allocating, when there is none.
    #[must_use]
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.redact_counting(text, &mut Redactions::new())
    }

    /// As [`redact`](Self::redact), adding one to `counts` per secret
    /// replaced, under the rule's name.
    pub fn redact_counting<'t>(&self, text: &'t str, counts: &mut Redactions) -> Cow<'t, str> {
        let mut keyed = self.keyword_candidates(text);
        let hits = self.hits(text, keyed.as_deref());
        if hits.is_empty() {
            return Cow::Borrowed(text);
        }
        let (mut redacted, mut markers) = self.replace(text, &hits, counts);
        // A secret's replacement can change what its neighbours look like
        // (a rule may need a word boundary where the secret ended): repeat
        // until a pass finds nothing, so that redacting the output again
        // changes nothing. Each pass replaces at least one character outside
        // markers and markers are never matched, so this ends; in practice
        // the second pass finds nothing.
        //
        // A later pass looks for keywords only around the markers the last
        // one made: every part of the new text between markers is a part of
        // the text before, whose keywords are known, so a keyword the new
        // text holds that the old did not overlaps a new marker (markers name
        // rules: `<redacted:kv_secret>` holds `secret`). The rules tried are
        // then those the text redacting the output again would try, and
        // perhaps some more, so the output is still a fixed point.
        loop {
            let keyed = keyed.get_or_insert_with(|| vec![false; self.rules.len()]);
            self.add_keywords_around(&redacted, &markers, keyed);
            let hits = self.hits(&redacted, Some(keyed));
            if hits.is_empty() {
                return Cow::Owned(redacted);
            }
            (redacted, markers) = self.replace(&redacted, &hits, counts);
        }
    }

    /// Marks in `keyed` the rules with a keyword that overlaps one of
    /// `markers` (spans of `text`).
    fn add_keywords_around(&self, text: &str, markers: &[(usize, usize)], keyed: &mut [bool]) {
        let reach = self.scanner.overlap();
        let mut windows: Vec<(usize, usize)> = Vec::with_capacity(markers.len());
        for &(start, end) in markers {
            let window = (start.saturating_sub(reach), (end + reach).min(text.len()));
            match windows.last_mut() {
                Some(last) if window.0 <= last.1 => last.1 = window.1,
                _ => windows.push(window),
            }
        }
        for (start, end) in windows {
            self.scanner.scan(&text.as_bytes()[start..end], |tags| {
                for &rule in tags {
                    if let Some(slot) = keyed.get_mut(rule as usize) {
                        *slot = true;
                    }
                }
            });
        }
    }

    /// The value of a field whose name is `key` (a JSON member, a SQL
    /// column): when `key` names a secret (`password`, `db_password`,
    /// `apiKey`, `client_secret`, ...), the whole value is one secret,
    /// replaced by one marker: the rule whose shape it has, or `kv_secret`.
    /// A value that is a placeholder or allowlisted stays. Otherwise, as
    /// [`redact_counting`](Self::redact_counting).
    pub fn redact_field<'t>(
        &self,
        key: &str,
        value: &'t str,
        counts: &mut Redactions,
    ) -> Cow<'t, str> {
        if self.names_secret(key)
            && let Some(rule) = self.whole_value_rule(value)
        {
            let rule = &self.rules[rule];
            counts.add(&rule.name, 1);
            return Cow::Owned(rule.marker.to_string());
        }
        self.redact_counting(value, counts)
    }

    /// False when no rule can find a secret in `text`: it holds no rule's
    /// keyword and matches no rule without keywords. Then no JSON member name
    /// in it [names a secret](Self::names_secret) either (every such name
    /// holds a keyword of `kv_secret`), so a caller may skip parsing it; a
    /// text holding a `\u` escape is always true, since an escaped name
    /// (`"api\u005fkey"`) holds its keyword only once parsed. Allocates
    /// nothing when false.
    #[must_use]
    pub fn may_hold_secrets(&self, text: &str) -> bool {
        self.keyword_candidates(text).is_some()
            || self
                .unkeyed
                .as_ref()
                .is_some_and(|(_, set)| set.is_match(text))
            || holds_unicode_escape(text.as_bytes())
    }

    /// Whether the keyword filter and scanner gave up being built (too many
    /// keywords): every text is then tried with every rule.
    #[cfg(test)]
    pub(super) fn keyword_automata_gave_up(&self) -> (bool, bool) {
        (self.filter.gave_up(), self.scanner.gave_up())
    }

    /// The rules whose keywords `text` holds (in the case they count in),
    /// by index; `None`, without allocating, when it holds none.
    fn keyword_candidates(&self, text: &str) -> Option<Vec<bool>> {
        if !self.filter.may_match(text.as_bytes()) {
            return None;
        }
        let mut candidate: Option<Vec<bool>> = None;
        self.scanner.scan(text.as_bytes(), |tags| {
            let candidate = candidate.get_or_insert_with(|| vec![false; self.rules.len()]);
            for &rule in tags {
                if let Some(slot) = candidate.get_mut(rule as usize) {
                    *slot = true;
                }
            }
        });
        candidate
    }

    /// True when a field named `key` holds a secret (`password`,
    /// `DB_PASSWORD`, `accessToken`, `aws_secret_access_key`; not
    /// `password_expiry_days`).
    #[must_use]
    pub fn names_secret(&self, key: &str) -> bool {
        self.secret_key.is_match(key)
    }

    /// Redacts every string inside `value`, in place: strings anywhere,
    /// member names included; a string or number member (or array of them)
    /// under a name that [names a secret](Self::names_secret) is replaced
    /// whole, as [`redact_field`](Self::redact_field) does. Nothing is
    /// removed: two member names that redact to the same text are told
    /// apart by a ` (2)`, ` (3)`... suffix. Allocates nothing when there is
    /// nothing to redact.
    pub fn redact_json(&self, value: &mut Value, counts: &mut Redactions) {
        match value {
            Value::String(text) => {
                if let Cow::Owned(redacted) = self.redact_counting(text, counts) {
                    *text = redacted;
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.redact_json(item, counts);
                }
            }
            Value::Object(members) => {
                for (name, member) in members.iter_mut() {
                    if self.names_secret(name) {
                        self.redact_secret_member(member, counts);
                    } else {
                        self.redact_json(member, counts);
                    }
                }
                if members.keys().any(|name| !self.hits_of(name).is_empty()) {
                    let old = std::mem::take(members);
                    for (name, member) in old {
                        let name = self.redact_counting(&name, counts).into_owned();
                        let mut unique = name.clone();
                        let mut n = 1;
                        while members.contains_key(&unique) {
                            n += 1;
                            unique = format!("{name} ({n})");
                        }
                        members.insert(unique, member);
                    }
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// A member value under a name that names a secret.
    fn redact_secret_member(&self, value: &mut Value, counts: &mut Redactions) {
        match value {
            Value::String(text) => {
                if let Some(rule) = self.whole_value_rule(text) {
                    let rule = &self.rules[rule];
                    counts.add(&rule.name, 1);
                    *text = rule.marker.to_string();
                } else if let Cow::Owned(redacted) = self.redact_counting(text, counts) {
                    *text = redacted;
                }
            }
            Value::Number(_) => {
                let rule = &self.rules[self.kv_secret];
                counts.add(&rule.name, 1);
                *value = Value::String(rule.marker.to_string());
            }
            Value::Array(items) => {
                for item in items {
                    self.redact_secret_member(item, counts);
                }
            }
            Value::Object(_) => self.redact_json(value, counts),
            Value::Null | Value::Bool(_) => {}
        }
    }

    /// The rule that names `value` as a whole secret: the one rule whose
    /// secret is exactly the (trimmed) value, else `kv_secret`; `None` for a
    /// value that is no secret (blank, a placeholder, allowlisted, already a
    /// marker).
    fn whole_value_rule(&self, value: &str) -> Option<usize> {
        let trimmed = value.trim();
        if trimmed.is_empty() || !self.is_secret_value(trimmed) || is_marker(trimmed) {
            return None;
        }
        let offset = value.len() - value.trim_start().len();
        match self.hits_of(value).as_slice() {
            [hit] if hit.start == offset && hit.end == offset + trimmed.len() => Some(hit.rule),
            _ => Some(self.kv_secret),
        }
    }

    /// False for the secret part of a match that is no secret: allowlisted,
    /// one repeated character, or one of the [`NON_SECRET_SHAPES`].
    fn is_secret_value(&self, secret: &str) -> bool {
        let mut chars = secret.chars();
        let Some(first) = chars.next() else {
            return false;
        };
        !(chars.all(|c| c == first)
            || self.allow.contains(secret)
            || self.non_secret.is_match(secret))
    }

    /// One pass: every secret in `text`, outside existing markers, sorted,
    /// overlaps merged (leftmost, then longest, then the earlier rule
    /// names the merged span). Empty, without allocating, when the text
    /// holds no rule's keyword and no rule without keywords matches it.
    fn hits_of(&self, text: &str) -> Vec<Hit> {
        self.hits(text, self.keyword_candidates(text).as_deref())
    }

    /// As [`hits_of`](Self::hits_of), trying the rules marked in `keyed`
    /// (those whose keywords `text` holds, or more) and the rules without
    /// keywords that match `text`.
    fn hits(&self, text: &str, keyed: Option<&[bool]>) -> Vec<Hit> {
        let unkeyed = self
            .unkeyed
            .as_ref()
            .filter(|(_, set)| set.is_match(text))
            .map(|(rules, set)| (rules, set.matches(text)));
        if keyed.is_none() && unkeyed.is_none() {
            return Vec::new();
        }
        let mut candidate = keyed.map_or_else(|| vec![false; self.rules.len()], <[bool]>::to_vec);
        if let Some((rules, matched)) = unkeyed {
            for i in matched.iter() {
                candidate[rules[i]] = true;
            }
        }
        let mut hits = Vec::new();
        for index in (0..self.rules.len()).filter(|&i| candidate[i]) {
            for (offset, segment) in Segments::new(text) {
                self.rule_hits(index, segment, offset, &mut hits);
            }
        }
        hits.sort_unstable_by_key(|h| (h.start, std::cmp::Reverse(h.end), h.rule));
        hits.dedup_by(|later, kept| {
            if later.start < kept.end {
                kept.end = kept.end.max(later.end);
                true
            } else {
                false
            }
        });
        hits
    }

    /// The secrets rule `index` finds in `segment` (a marker-free part of a
    /// text starting at `offset`).
    fn rule_hits(&self, index: usize, segment: &str, offset: usize, hits: &mut Vec<Hit>) {
        let rule = &self.rules[index];
        // Most texts a rule is tried on hold no match: the capture groups
        // (slower to find, and allocated) are only looked for in one that
        // does.
        let mut locations = None;
        let mut at = 0;
        while at <= segment.len() {
            if !rule.regex.is_match_at(segment, at) {
                break;
            }
            let locations = locations.get_or_insert_with(|| rule.regex.capture_locations());
            // The same search, with groups: it finds the same match.
            let Some(whole) = rule.regex.captures_read_at(locations, segment, at) else {
                break;
            };
            at = if whole.end() > at {
                whole.end()
            } else {
                next_char_boundary(segment, at)
            };
            let (start, end) = (rule.secret_group..locations.len())
                .filter_map(|g| locations.get(g))
                .find(|(s, e)| s < e)
                .unwrap_or((whole.start(), whole.end()));
            if start < end && self.is_secret_value(&segment[start..end]) {
                hits.push(Hit {
                    start: offset + start,
                    end: offset + end,
                    rule: index,
                });
            }
        }
    }

    /// `text` with each hit replaced by its rule's marker, counted, and the
    /// markers' spans in it.
    fn replace(
        &self,
        text: &str,
        hits: &[Hit],
        counts: &mut Redactions,
    ) -> (String, Vec<(usize, usize)>) {
        let markers: usize = hits.iter().map(|h| self.rules[h.rule].marker.len()).sum();
        let mut out = String::with_capacity(text.len() + markers);
        let mut spans = Vec::with_capacity(hits.len());
        let mut last = 0;
        for hit in hits {
            let rule = &self.rules[hit.rule];
            out.push_str(&text[last..hit.start]);
            spans.push((out.len(), out.len() + rule.marker.len()));
            out.push_str(&rule.marker);
            counts.add(&rule.name, 1);
            last = hit.end;
        }
        out.push_str(&text[last..]);
        (out, spans)
    }
}

/// Compiles and checks one rule.
fn compile_rule(
    name: &str,
    pattern: &str,
    secret_group: Option<usize>,
    keywords: Vec<String>,
    case_sensitive_keywords: bool,
) -> Result<Rule, RedactionError> {
    let rule = || name.to_owned();
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid_name {
        return Err(RedactionError::InvalidName { rule: rule() });
    }
    let invalid = |e: &dyn fmt::Display| RedactionError::InvalidRegex {
        rule: rule(),
        reason: first_line(&e.to_string()),
    };
    let hir = regex_syntax::Parser::new()
        .parse(pattern)
        .map_err(|e| invalid(&e))?;
    let regex = RegexBuilder::new(pattern)
        .build()
        .map_err(|e| invalid(&e))?;
    if hir.properties().minimum_len() == Some(0) {
        return Err(RedactionError::MatchesEmpty { rule: rule() });
    }
    let groups = regex.captures_len();
    let secret_group = secret_group.unwrap_or(usize::from(groups > 1));
    if secret_group >= groups {
        return Err(RedactionError::InvalidSecretGroup {
            rule: rule(),
            group: secret_group,
            groups: groups - 1,
        });
    }
    if secret_group > 0 && group_minimum_len(&hir, secret_group) == Some(0) {
        return Err(RedactionError::EmptySecret {
            rule: rule(),
            group: secret_group,
        });
    }
    let mut lowercase = Vec::with_capacity(keywords.len());
    for keyword in &keywords {
        if keyword.is_empty() {
            return Err(RedactionError::EmptyKeyword { rule: rule() });
        }
        lowercase.push(keyword.to_ascii_lowercase().into_boxed_str());
    }
    let exact_keywords = case_sensitive_keywords.then(|| {
        keywords
            .into_iter()
            .map(String::into_boxed_str)
            .collect::<Box<[_]>>()
    });
    Ok(Rule {
        name: name.into(),
        marker: marker(name).into_boxed_str(),
        regex,
        secret_group,
        keywords: lowercase.into_boxed_slice(),
        exact_keywords,
    })
}

/// The shortest text capture group `index` of `hir` can match; `None` when
/// the group cannot match (or is not there).
fn group_minimum_len(hir: &regex_syntax::hir::Hir, index: usize) -> Option<usize> {
    use regex_syntax::hir::HirKind;
    match hir.kind() {
        HirKind::Capture(capture) if capture.index as usize == index => {
            capture.sub.properties().minimum_len()
        }
        HirKind::Capture(capture) => group_minimum_len(&capture.sub, index),
        HirKind::Repetition(repetition) => group_minimum_len(&repetition.sub, index),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => {
            subs.iter().find_map(|sub| group_minimum_len(sub, index))
        }
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => None,
    }
}

/// The first line of an error message (regex errors span several, with a
/// caret diagram).
fn first_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid")
        .to_owned()
}

/// The byte index of the character after the one at `at`.
fn next_char_boundary(text: &str, at: usize) -> usize {
    text[at..]
        .chars()
        .next()
        .map_or(text.len() + 1, |c| at + c.len_utf8())
}

/// True when `text` is exactly one marker.
fn is_marker(text: &str) -> bool {
    marker_len(text) == Some(text.len())
}

/// The length of the marker `text` starts with, if it starts with one:
/// `<redacted:` + `[a-z0-9_]+` + `>`.
fn marker_len(text: &str) -> Option<usize> {
    let name = text.strip_prefix(MARKER_PREFIX)?;
    let name_len = name
        .bytes()
        .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
        .count();
    (name_len > 0 && name.as_bytes().get(name_len) == Some(&b'>'))
        .then_some(MARKER_PREFIX.len() + name_len + 1)
}

/// The parts of a text between markers, with their offsets: rules never
/// match a marker, nor across one.
struct Segments<'t> {
    text: &'t str,
    at: usize,
}

impl<'t> Segments<'t> {
    const fn new(text: &'t str) -> Self {
        Self { text, at: 0 }
    }
}

impl<'t> Iterator for Segments<'t> {
    type Item = (usize, &'t str);

    fn next(&mut self) -> Option<Self::Item> {
        while self.at < self.text.len() {
            let start = self.at;
            let mut search = start;
            loop {
                // Markers are rare: one `<` search (vectorized) before
                // looking for the whole prefix.
                let Some(found) = memchr::memchr(b'<', &self.text.as_bytes()[search..]) else {
                    self.at = self.text.len();
                    return Some((start, &self.text[start..]));
                };
                let marker_start = search + found;
                if let Some(len) = marker_len(&self.text[marker_start..]) {
                    self.at = marker_start + len;
                    if marker_start > start {
                        return Some((start, &self.text[start..marker_start]));
                    }
                    break;
                }
                search = marker_start + 1;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_skip_markers_and_only_markers() {
        fn parts(text: &str) -> Vec<(usize, &str)> {
            Segments::new(text).collect()
        }
        assert_eq!(parts(""), vec![]);
        assert_eq!(parts("plain"), vec![(0, "plain")]);
        assert_eq!(parts("a<redacted:kv_secret>b"), vec![(0, "a"), (21, "b")]);
        assert_eq!(parts("<redacted:x><redacted:y>"), vec![]);
        assert_eq!(
            parts("<redacted:Bad> <redacted:>"),
            vec![(0, "<redacted:Bad> <redacted:>")]
        );
        assert_eq!(
            parts("<redacted:<redacted:r>>"),
            vec![(0, "<redacted:"), (22, ">")]
        );
    }

    #[test]
    fn counts_add_merge_and_serialize_as_an_object() {
        let mut counts = Redactions::new();
        assert!(counts.is_empty());
        counts.add("url_password", 1);
        counts.add("kv_secret", 2);
        counts.add("kv_secret", 0);
        let mut other = Redactions::new();
        other.add("kv_secret", u32::MAX);
        counts.merge(&other);
        assert_eq!(counts.get("kv_secret"), u32::MAX);
        assert_eq!(counts.get("jwt"), 0);
        assert_eq!(counts.total(), u64::from(u32::MAX) + 1);
        assert_eq!(
            serde_json::to_string(&counts).unwrap(),
            format!(r#"{{"kv_secret":{},"url_password":1}}"#, u32::MAX)
        );
        let back: Redactions = serde_json::from_str(r#"{"jwt":3}"#).unwrap();
        assert_eq!(back.iter().collect::<Vec<_>>(), vec![("jwt", 3)]);
    }
}
