//! Extra rules and the allowlist, as configuration states them.

use std::path::PathBuf;

use serde::Deserialize;

use super::Redactor;

/// One rule of a rules file: the same shape as a
/// [built-in rule](super::BuiltinRule).
///
/// ```toml
/// [[rules]]
/// name = "acme_token"
/// regex = '''(?-u:\b)(acme_[a-z0-9]{32})'''
/// secret_group = 1
/// keywords = ["acme_"]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Lowercase `[a-z0-9_]`, 1 to 64 bytes, unique among all rules (the
    /// built-in ones included): the marker is `<redacted:NAME>`.
    pub name: String,
    /// The pattern, Rust `regex` syntax. It must not match the empty string.
    pub regex: String,
    /// The capture group that is the secret; only it is replaced. `0` is the
    /// whole match. Default: `1` when the regex has a capture group, else
    /// `0`. When alternatives capture the secret in different groups, number
    /// them from this one: the secret is the first non-empty group at or
    /// after this index (the whole match if none is).
    #[serde(default)]
    pub secret_group: Option<usize>,
    /// The rule is only tried on text that contains one of these (ASCII
    /// case-insensitive unless `case_sensitive_keywords`), so every match
    /// must contain one. Without keywords
    /// the rule is scanned for in every text (slower).
    #[serde(default)]
    pub keywords: Vec<String>,
    /// True when the keywords count only as written (`SK`, not `sk` in
    /// `task`): for rules whose regex matches them in one case only, so
    /// that text holding them in another case is not searched. Default:
    /// false (ASCII case-insensitive).
    #[serde(default)]
    pub case_sensitive_keywords: bool,
    /// What the rule finds, for people.
    #[serde(default)]
    pub description: Option<String>,
}

/// A rules file: `[[rules]]` entries ([`RuleSpec`]), TOML. The application
/// reads and parses it; this crate does no I/O.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesFile {
    /// The rules, after the built-in ones (an earlier rule names a secret two
    /// rules find).
    #[serde(default)]
    pub rules: Vec<RuleSpec>,
}

/// The `[redaction]` section of a configuration file. Unknown keys are
/// refused.
///
/// ```toml
/// [redaction]
/// rules_file = "/etc/aci/redaction-rules.toml"
/// allow = ["AKIAIOSFODNN7EXAMPLE", "guest"]
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionConfig {
    /// A [`RulesFile`] of extra rules.
    pub rules_file: Option<PathBuf>,
    /// Literal values that are not secrets: a secret part equal to one of
    /// them is left as it is.
    #[serde(default)]
    pub allow: Vec<String>,
}

impl RedactionConfig {
    /// The built-in rules, then `extra` (the parsed [`rules_file`](Self::rules_file)),
    /// with this allowlist.
    ///
    /// # Errors
    /// As [`Redactor::new`].
    pub fn redactor(&self, extra: &[RuleSpec]) -> Result<Redactor, RedactionError> {
        Redactor::new(extra, self.allow.iter().cloned())
    }
}

/// A rule or allowlist that is refused. The message names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedactionError {
    /// The name is not lowercase `[a-z0-9_]`, 1 to 64 bytes.
    #[error("redaction rule `{rule}`: the name must be 1 to 64 of `a-z`, `0-9`, `_`")]
    InvalidName {
        /// The rule.
        rule: String,
    },
    /// Two rules (or a rule and a built-in one) share a name.
    #[error("redaction rule `{rule}`: the name is taken")]
    DuplicateName {
        /// The rule.
        rule: String,
    },
    /// The regex does not compile.
    #[error("redaction rule `{rule}`: invalid regex: {reason}")]
    InvalidRegex {
        /// The rule.
        rule: String,
        /// The regex parser's message (first line).
        reason: String,
    },
    /// The regex can match the empty string.
    #[error("redaction rule `{rule}`: the regex can match the empty string")]
    MatchesEmpty {
        /// The rule.
        rule: String,
    },
    /// The secret group is not one of the regex's groups.
    #[error("redaction rule `{rule}`: secret_group {group}, but the regex has {groups} group(s)")]
    InvalidSecretGroup {
        /// The rule.
        rule: String,
        /// The configured group.
        group: usize,
        /// The regex's capture groups (not counting the whole match).
        groups: usize,
    },
    /// The secret group can match the empty string.
    #[error("redaction rule `{rule}`: secret group {group} can match the empty string")]
    EmptySecret {
        /// The rule.
        rule: String,
        /// The configured group.
        group: usize,
    },
    /// A keyword is empty.
    #[error("redaction rule `{rule}`: a keyword is empty")]
    EmptyKeyword {
        /// The rule.
        rule: String,
    },
    /// An allowlist value is empty.
    #[error("redaction allowlist: a value is empty")]
    EmptyAllowValue,
    /// The rules together are too large for one automaton.
    #[error("redaction rules: too large together: {reason}")]
    TooLarge {
        /// The regex compiler's message (first line).
        reason: String,
    },
}

impl RedactionError {
    /// The stable code of the refusal.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::InvalidName { .. } => "REDACTION_RULE_INVALID_NAME",
            Self::DuplicateName { .. } => "REDACTION_RULE_DUPLICATE_NAME",
            Self::InvalidRegex { .. } => "REDACTION_RULE_INVALID_REGEX",
            Self::MatchesEmpty { .. } => "REDACTION_RULE_MATCHES_EMPTY",
            Self::InvalidSecretGroup { .. } => "REDACTION_RULE_INVALID_SECRET_GROUP",
            Self::EmptySecret { .. } => "REDACTION_RULE_EMPTY_SECRET",
            Self::EmptyKeyword { .. } => "REDACTION_RULE_EMPTY_KEYWORD",
            Self::EmptyAllowValue => "REDACTION_ALLOW_EMPTY_VALUE",
            Self::TooLarge { .. } => "REDACTION_RULES_TOO_LARGE",
        }
    }

    /// The rule refused, when one is.
    #[must_use]
    pub fn rule(&self) -> Option<&str> {
        match self {
            Self::InvalidName { rule }
            | Self::DuplicateName { rule }
            | Self::InvalidRegex { rule, .. }
            | Self::MatchesEmpty { rule }
            | Self::InvalidSecretGroup { rule, .. }
            | Self::EmptySecret { rule, .. }
            | Self::EmptyKeyword { rule } => Some(rule),
            Self::EmptyAllowValue | Self::TooLarge { .. } => None,
        }
    }
}
