//! Redaction: what must not leave the boundary, in two kinds.
//!
//! **Infrastructure in URLs** ([`connection_url`], [`link`]): the URL of a
//! store or database shows only its scheme and path (never credentials,
//! host or port), for operators' lines; a document link that is evidence
//! loses its userinfo and query string but keeps host and path, so the
//! model can see where evidence came from.
//!
//! **Credentials inside evidence** ([`Redactor`]): every text a projector
//! puts in the Model Observation (log messages, SQL cells, knowledge
//! excerpts, titles, sources) goes through the projection's
//! [`RedactionPass`] ([`ProjectionContext::redact`](crate::ProjectionContext::redact),
//! or `redact_field` / `redact_json` for named and structured values, over
//! [`Redactor::redact_counting`] and its siblings) **before** bounding, so
//! sizes and `truncated` are those of the redacted text. The boundary's
//! redactor is [`Redactor::builtin`] unless
//! [`ToolBoundaryBuilder::redactor`](crate::ToolBoundaryBuilder::redactor)
//! sets another; the counts go to the record and the Harness Control View. The raw response in the record is never redacted:
//! the harness keeps the truth.
//!
//! # What redaction guarantees
//!
//! - Only the **secret part** of a match is replaced, by `<redacted:RULE>`;
//!   key names and surrounding words stay:
//!   `https://svc:<redacted:url_password>@api.internal/v1`,
//!   `export GITHUB_TOKEN=<redacted:github_token>`. No other text is
//!   dropped, added or reordered.
//! - **Counts** per rule name ([`Redactions`], never the values) for the
//!   harness's control view.
//! - **Idempotent**: redacting the output again changes nothing. Markers
//!   are never matched (rules see only the text between them), and a pass
//!   repeats until it finds nothing (a repeated pass looks for keywords
//!   only around the markers just made: the rest was looked at; a marker
//!   can bring one, `<redacted:kv_secret>` holds `secret`). Text that
//!   already has a marker's shape (`<redacted:name>`) is left as it is,
//!   like any marker.
//! - **Deterministic overlaps**: when secrets found by several rules
//!   overlap, they merge into one marker, named by the leftmost, then
//!   longest, then earlier rule in the table (specific shapes come before
//!   the generic `key=value` rule).
//! - **Cheap when clean**: a first look by a small DFA over every rule's
//!   keywords (their first 8 bytes: `ghp_`, `AKIA`, `://`, `password`,
//!   ...), walking four parts of a long text side by side, says whether
//!   the text can hold a keyword at all; when it cannot, the text is
//!   returned borrowed, nothing allocated. Otherwise a second DFA, over the
//!   whole keywords, finds in one scan which rules' keywords it holds, and
//!   only those rules' own regexes run, for positions. Keywords are ASCII
//!   case-insensitive unless their rule says they count only as written
//!   (`SK` for Twilio keys is not `sk` in `task`). A rule without keywords (a rules file may have some)
//!   is found by one [`regex::RegexSet`] over all such rules, scanned on
//!   every text.
//!
//! A value is never a secret, whichever rule found it, when it is one
//! repeated character (`********`, `x`), one of the [`NON_SECRET_SHAPES`]
//! (`true`/`null`/`YES`, `${VAR}`, `$(cmd ...)`, `{{ .Values.x }}`,
//! `<your-token>`, `****4242`, `/run/secrets/db`, ...), or on the
//! configured allowlist. So `(using password: YES)`, `PWD=/root` and
//! `password: ${DB_PASSWORD}` stay as they are.
//!
//! # The rules
//!
//! In priority order ([`BUILTIN_RULES`]); `SECRET` is what the marker
//! replaces. The shapes follow gitleaks' default rule set (MIT),
//! reimplemented.
//!
//! | rule | example shape |
//! |---|---|
//! | `pem_private_key` | `-----BEGIN RSA PRIVATE KEY-----` / SECRET (every line of the body) / `-----END RSA PRIVATE KEY-----`; any `... PRIVATE KEY` or `PGP PRIVATE KEY BLOCK`; without an END line, all that follows the BEGIN line |
//! | `jwt` | `eyJhbGciOi...`.`eyJzdWIi...`.`signature` (the whole token) |
//! | `aws_access_key_id` | `AKIA` + 16 of `A-Z2-7` (also `ASIA`, `ABIA`, `ACCA`) |
//! | `github_token` | `ghp_` + 36 alphanumerics (`gho_`, `ghu_`, `ghs_`, `ghr_`), `github_pat_...` |
//! | `gitlab_token` | `glpat-` + 20 or more (`gldt-`, `glrt-`, `glptt-`, `gloas-`, ...) |
//! | `slack_token` | `xoxb-123...-...` (`xoxp-`, `xoxa-`, `xoxe-`, `xapp-`); `hooks.slack.com/services/`SECRET |
//! | `stripe_key` | `sk_live_...`, `rk_live_...`, `pk_live_...` (and `_test_`), `whsec_...` |
//! | `google_api_key` | `AIza` + 35 |
//! | `google_oauth` | `GOCSPX-` + 28, `ya29.` + 20 or more |
//! | `npm_token` | `npm_` + 36 |
//! | `pypi_token` | `pypi-AgEIcHlwaS5vcmc...` |
//! | `anthropic_key` | `sk-ant-api03-...` |
//! | `openai_key` | `sk-proj-...`, `sk-svcacct-...`, `sk-` + 20 or more alphanumerics |
//! | `huggingface_token` | `hf_` + 34 letters |
//! | `digitalocean_token` | `dop_v1_` + 64 hex (`doo_v1_`, `dor_v1_`) |
//! | `sendgrid_key` | `SG.` + 22 + `.` + 43 |
//! | `twilio_api_key` | `SK` + 32 lowercase hex |
//! | `shopify_token` | `shpat_` + 32 hex (`shpca_`, `shppa_`, `shpss_`) |
//! | `databricks_token` | `dapi` + 32 hex |
//! | `vault_token` | `hvs.` + 24 or more (`hvb.`, `hvr.`) |
//! | `terraform_token` | 14 + `.atlasv1.` + 60 or more |
//! | `age_secret_key` | `AGE-SECRET-KEY-1` + 58 |
//! | `grafana_token` | `glsa_...`, `glc_...`, `eyJrIjoi...` |
//! | `sentry_token` | `sntrys_...`, `sntryu_...` |
//! | `doppler_token` | `dp.pt.` + 40 or more |
//! | `linear_key` | `lin_api_` + 40 |
//! | `planetscale_token` | `pscale_tkn_...`, `pscale_oauth_...`, `pscale_pw_...` |
//! | `postman_key` | `PMAK-` + 24 hex + `-` + 34 hex |
//! | `pulumi_token` | `pul-` + 40 hex |
//! | `rubygems_token` | `rubygems_` + 48 hex |
//! | `dynatrace_token` | `dt0c01.` + 24 + `.` + 64 |
//! | `newrelic_key` | `NRAK-...`, `NRII-...` |
//! | `square_token` | `sq0atp-...`, `sq0csp-...` |
//! | `atlassian_token` | `ATATT3...` |
//! | `telegram_bot_token` | `123456789:AA` + 33 |
//! | `azure_client_secret` | `abc8Q~` + 31 to 34 |
//! | `discord_webhook` | `discord.com/api/webhooks/123/`SECRET |
//! | `aws_secret_access_key` | `aws_secret_access_key = `SECRET (40 base64; also `AWS_SECRET_ACCESS_KEY=`, `"SecretAccessKey": "`SECRET`"`) |
//! | `jdbc_password` | `jdbc:mysql://db/shop?user=app&password=`SECRET, `jdbc:sqlserver://db;password=`SECRET, `jdbc:oracle:thin:scott/`SECRET`@db` |
//! | `cli_password` | `mysql -p`SECRET, `redis-cli -a `SECRET, `curl -u user:`SECRET, `sshpass -p `SECRET |
//! | `url_password` | `scheme://user:`SECRET`@host` (any scheme; empty user too: `redis://:`SECRET`@cache`) |
//! | `authorization_header` | `Authorization: Bearer `SECRET (`Basic`, `Token`), a bare `Bearer `SECRET of 16 or more |
//! | `kv_secret` | `password=`SECRET, `DB_PASSWORD: `SECRET, `"client_secret": "`SECRET`"`, `--api-key `SECRET, `token => "`SECRET`"` |
//!
//! `kv_secret` takes a key that ends with a word naming a secret:
//! `password`, `passwd`, `passphrase`, `pwd`, `secret`, `token`,
//! `credential(s)`, `authorization`, or `api`/`access`/`secret`/`private`/
//! `account`/`encryption`/`signing`/`master`/`client` + `key`, with any
//! prefix, any case and `_ . -` separators (`DB_PASSWORD`,
//! `spring.datasource.password`, `clientSecret`, `X-Api-Key`), never a
//! suffix (`password_expiry_days`, `token_count` stay). Its forms: `=`,
//! `:=`, `=>` anywhere; `key: value` at the start of a line or after a
//! field separator (`{ ( [ , ; |` or a tab), not inside prose; a quoted key
//! with `:` (JSON); `--key value` flags. A quoted value may hold spaces; a
//! bare value ends at whitespace, a quote, `,`, `;` or `&`. The same key
//! words make [`Redactor::redact_field`] and [`Redactor::redact_json`]
//! replace a field's whole value (a `password` column, a `"token"` member).
//!
//! Not found, on purpose or for lack of context: a password in prose
//! without a separator (`the password is hunter2`), a bare base64 line of a
//! private key whose BEGIN line is in another text, high-entropy strings
//! without a known shape or key.
//!
//! # Adding rules and allowing values
//!
//! Rules are data. The `[redaction]` section of the configuration
//! ([`RedactionConfig`]) names a rules file and an allowlist:
//!
//! ```toml
//! [redaction]
//! rules_file = "/etc/aci/redaction-rules.toml"
//! allow = ["AKIAIOSFODNN7EXAMPLE", "guest"]
//! ```
//!
//! The rules file ([`RulesFile`]) holds rules in the built-in rules' shape
//! ([`RuleSpec`]); they come after the built-in ones:
//!
//! ```toml
//! [[rules]]
//! name = "acme_token"                          # lowercase [a-z0-9_], unique
//! regex = '''(?-u:\b)acme_(?:live|test)_([a-z0-9]{32})'''
//! secret_group = 1                             # default: 1 if there is a group, else 0 (whole match)
//! keywords = ["acme_"]                         # only tried on text holding one (see below)
//! case_sensitive_keywords = false              # default; true: `acme_` counts, `ACME_` does not
//! description = "ACME API tokens"              # optional
//! ```
//!
//! A rule whose name is not lowercase `[a-z0-9_]` or is taken, whose regex
//! does not compile or can match the empty string, whose secret group does
//! not exist or can be empty, is a [`RedactionError`] naming the rule.
//! Give keywords: a rule is only tried on text that holds one of them, so
//! every match must contain one (a match without any is missed); a rule
//! without keywords is scanned for in every text. Keywords are ASCII
//! case-insensitive unless `case_sensitive_keywords = true`: set it when
//! the regex matches the keywords in one case only, so that text holding
//! them in another case is not searched. Rules files of a few hundred
//! keywords keep the keyword automata; from about a thousand (of a dozen
//! bytes each) they give up, the scanner first, then the filter, and texts
//! are tried with every rule: slower, with the same result. Keywords are found in ASCII case
//! forms only, so a regex with Unicode case folding (`(?i)acme_key`
//! matches `acme_\u{212A}ey`, a Kelvin sign) can match text its keyword is
//! not found in: use `(?i-u:...)`. Prefer `(?-u:\b)` to `\b`
//! and `(?i-u:...)` to `(?i)`: ASCII word boundaries keep a regex a DFA on
//! non-ASCII text.
//!
//! An allowlisted value is compared with the secret part, literally: a
//! documentation example key, a known test password.
//!
//! To see what the rules do to real text (false positives, missed
//! secrets), `cargo run -p aci-bench --bin redact_scan -- FILE...` prints
//! every line that would carry a marker (redacted) and the counts per rule.
//! `tests/data/redaction_corpus/` holds real secret-free lines that must get
//! no marker; `cargo xtask bench redaction` measures the cost.

mod config;
mod filter;
mod pass;
mod redactor;
mod rules;
mod scanner;
mod url;

#[cfg(test)]
pub(crate) mod tests;

pub use config::{RedactionConfig, RedactionError, RuleSpec, RulesFile};
pub use pass::RedactionPass;
pub use redactor::{MARKER_PREFIX, Redactions, Redactor, marker};
pub use rules::{BUILTIN_RULES, BuiltinRule, NON_SECRET_SHAPES};
pub use url::{REDACTED, UNPARSABLE, connection_url, link};
