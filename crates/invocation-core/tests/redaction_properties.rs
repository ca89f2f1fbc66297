//! Properties of secret redaction over arbitrary text:
//!
//! - planted secrets of every rule, among arbitrary filler: none survives,
//!   the output is exactly the text with each secret replaced by its
//!   marker, the counts are what was planted, and redacting again changes
//!   nothing;
//! - arbitrary text full of the rules' syntax (keys, separators, prefixes,
//!   markers): redaction is idempotent, only replaces spans by markers
//!   (everything else stays, in order), and counts what it replaced.
//!
//! Case counts come from `PROPTEST_CASES` (testkit).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use invocation_core::redact::{MARKER_PREFIX, Redactions, Redactor, marker};
use proptest::prelude::*;
use proptest::string::string_regex;

/// A secret shape planted in context: `before` SECRET `after`.
struct Plant {
    rule: &'static str,
    before: &'static str,
    secret: &'static str,
    after: &'static str,
}

const fn plant(
    rule: &'static str,
    before: &'static str,
    secret: &'static str,
    after: &'static str,
) -> Plant {
    Plant {
        rule,
        before,
        secret,
        after,
    }
}

/// Every built-in rule, at least once; `: ` forms start a line. Passwords
/// start with a fixed letter so that no generated one is a placeholder.
const PLANTS: &[Plant] = &[
    plant(
        "pem_private_key",
        "-----BEGIN EC PRIVATE KEY-----\n",
        "MH[A-Za-z0-9+/]{62}\n[A-Za-z0-9+/]{40}==",
        "\n-----END EC PRIVATE KEY-----",
    ),
    plant(
        "jwt",
        "jwt=",
        "eyJ[A-Za-z0-9_-]{12,30}\\.eyJ[A-Za-z0-9_-]{12,40}\\.[A-Za-z0-9_-]{20,43}",
        " rejected",
    ),
    plant(
        "aws_access_key_id",
        "key id ",
        "AKIA[A-Z2-7]{16}",
        " denied",
    ),
    plant(
        "github_token",
        "export GITHUB_TOKEN=",
        "ghp_[A-Za-z0-9]{36}",
        "",
    ),
    plant(
        "github_token",
        "pat ",
        "github_pat_[A-Za-z0-9_]{82}",
        " used",
    ),
    plant(
        "gitlab_token",
        "git clone https://oauth2:",
        "glpat-[A-Za-z0-9_-]{20}",
        "@gitlab.internal/x.git",
    ),
    plant(
        "slack_token",
        "slack ",
        "xoxb-[0-9]{12}-[0-9]{13}-[A-Za-z0-9]{24}",
        " ok",
    ),
    plant(
        "slack_token",
        "https://hooks.slack.com/services/",
        "T[A-Z0-9]{8}/B[A-Z0-9]{10}/[A-Za-z0-9]{24}",
        " 404",
    ),
    plant(
        "stripe_key",
        "stripe ",
        "(sk|rk)_live_[A-Za-z0-9]{24,40}",
        " declined",
    ),
    plant("google_api_key", "&key=", "AIza[A-Za-z0-9_-]{35}", " 403"),
    plant(
        "google_oauth",
        "oauth ",
        "ya29\\.[A-Za-z0-9_-]{30,80}",
        " refreshed",
    ),
    plant(
        "npm_token",
        "//registry.npmjs.org/:_authToken=",
        "npm_[A-Za-z0-9]{36}",
        "",
    ),
    plant(
        "pypi_token",
        "pypi ",
        "pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{60,90}",
        " upload",
    ),
    plant(
        "anthropic_key",
        "claude ",
        "sk-ant-api03-[A-Za-z0-9_-]{93}AA",
        " ok",
    ),
    plant(
        "openai_key",
        "OPENAI_API_KEY=",
        "sk-proj-[A-Za-z0-9_-]{40,120}",
        "",
    ),
    plant("openai_key", "key ", "sk-[A-Za-z0-9]{48}", " ok"),
    plant("huggingface_token", "hf ", "hf_[A-Za-z]{34}", " ok"),
    plant("digitalocean_token", "do ", "dop_v1_[a-f0-9]{64}", " ok"),
    plant(
        "sendgrid_key",
        "sg ",
        "SG\\.[A-Za-z0-9_-]{22}\\.[A-Za-z0-9_-]{43}",
        " ok",
    ),
    plant("twilio_api_key", "twilio ", "SK[0-9a-f]{32}", " ok"),
    plant("shopify_token", "shop ", "shpat_[a-fA-F0-9]{32}", " ok"),
    plant("databricks_token", "dbx ", "dapi[a-f0-9]{32}", " ok"),
    plant("vault_token", "vault ", "hvs\\.[A-Za-z0-9_-]{90}", " ok"),
    plant(
        "terraform_token",
        "tf ",
        "[A-Za-z0-9]{14}\\.atlasv1\\.[A-Za-z0-9_=-]{67}",
        " ok",
    ),
    plant(
        "age_secret_key",
        "age ",
        "AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        " ok",
    ),
    plant(
        "grafana_token",
        "grafana ",
        "glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}",
        " ok",
    ),
    plant("sentry_token", "sentry ", "sntryu_[a-f0-9]{64}", " ok"),
    plant(
        "doppler_token",
        "doppler ",
        "dp\\.pt\\.[A-Za-z0-9]{43}",
        " ok",
    ),
    plant("linear_key", "linear ", "lin_api_[A-Za-z0-9]{40}", " ok"),
    plant(
        "planetscale_token",
        "ps ",
        "pscale_tkn_[A-Za-z0-9_]{43}",
        " ok",
    ),
    plant(
        "postman_key",
        "pm ",
        "PMAK-[a-f0-9]{24}-[a-f0-9]{34}",
        " ok",
    ),
    plant("pulumi_token", "pulumi ", "pul-[a-f0-9]{40}", " ok"),
    plant("rubygems_token", "gem ", "rubygems_[a-f0-9]{48}", " ok"),
    plant(
        "dynatrace_token",
        "dt ",
        "dt0c01\\.[A-Z0-9]{24}\\.[A-Za-z0-9]{64}",
        " ok",
    ),
    plant("newrelic_key", "nr ", "NRAK-[A-Z0-9]{27}", " ok"),
    plant("square_token", "sq ", "sq0atp-[A-Za-z0-9_-]{22}", " ok"),
    plant(
        "atlassian_token",
        "jira ",
        "ATATT3[A-Za-z0-9_-]{60,190}",
        " ok",
    ),
    plant(
        "telegram_bot_token",
        "bot ",
        "[1-9][0-9]{8}:AA[A-Za-z0-9_-]{33}",
        " ok",
    ),
    plant(
        "azure_client_secret",
        "azure ",
        "[A-Za-z0-9]{3}[0-9]Q~[A-Za-z0-9_~.-]{33}[A-Za-z0-9]",
        " ok",
    ),
    plant(
        "discord_webhook",
        "https://discord.com/api/webhooks/123456789012345678/",
        "[A-Za-z0-9_-]{68}",
        " 204",
    ),
    plant(
        "aws_secret_access_key",
        "\naws_secret_access_key = ",
        "[A-Za-z0-9/+]{40}",
        "\n",
    ),
    plant(
        "jdbc_password",
        "jdbc:postgresql://db/shop?user=app&password=",
        "p[A-Za-z0-9!+%]{7,15}",
        "&ssl=true",
    ),
    plant(
        "cli_password",
        "mysql -h db -u root -p",
        "p[A-Za-z0-9!+]{6,16}",
        " shop",
    ),
    plant(
        "cli_password",
        "redis-cli -a ",
        "p[A-Za-z0-9!+]{6,16}",
        " ping",
    ),
    plant(
        "url_password",
        "calling https://svc:",
        "p[A-Za-z0-9!+%#]{6,16}",
        "@api.internal/v1 failed",
    ),
    plant(
        "authorization_header",
        "Authorization: Bearer ",
        "[A-Za-z0-9]{20,40}",
        "\n",
    ),
    plant(
        "kv_secret",
        "password=",
        "s[A-Za-z0-9!#%^+]{6,20}",
        " user=app",
    ),
    plant(
        "kv_secret",
        "\n  DB_PASSWORD: ",
        "s[A-Za-z0-9!#%^+]{6,20}",
        "\n",
    ),
    plant(
        "kv_secret",
        r#"{"client_secret": ""#,
        "s[A-Za-z0-9 !#%^+]{6,20}[A-Za-z0-9]",
        r#"", "id": 7}"#,
    ),
    plant(
        "kv_secret",
        "deploy --api-key ",
        "s[A-Za-z0-9]{10,30}",
        " --verbose",
    ),
];

/// Filler that holds none of the rules' syntax: letters, digits, spaces,
/// `.,()` and CJK.
fn filler() -> impl Strategy<Value = String> {
    string_regex("[a-zA-Z0-9 .,()\u{4e00}-\u{4e2f}]{0,30}").unwrap()
}

#[derive(Debug, Clone)]
enum Fragment {
    Filler(String),
    Planted(usize, String),
}

fn fragment() -> impl Strategy<Value = Fragment> {
    prop_oneof![
        filler().prop_map(Fragment::Filler),
        (0..PLANTS.len()).prop_flat_map(|i| string_regex(PLANTS[i].secret)
            .unwrap()
            .prop_map(move |secret| Fragment::Planted(i, secret))),
    ]
}

fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![" ", "\n", " | ", "\t", " ; "])
}

/// Syntax of the rules, in pieces, for text that almost matches.
const PIECES: &[&str] = &[
    "password",
    "token",
    "secret",
    "api_key",
    "Authorization",
    "Bearer ",
    "Basic ",
    "=",
    ": ",
    ":",
    "\"",
    "'",
    "://",
    "@",
    "/",
    "-",
    "--",
    " ",
    "\n",
    "\t",
    ",",
    ";",
    "&",
    "?",
    "#",
    "{",
    "}",
    "$",
    "*",
    "ghp_",
    "AKIA",
    "eyJ",
    ".",
    "sk-",
    "mysql -p",
    "curl -u ",
    "jdbc:mysql://",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    MARKER_PREFIX,
    ">",
    "kv_secret",
    "<redacted:jwt>",
    "null",
    "https://u:",
    "xoxb-",
    "_v1_",
    "\u{4e2d}",
];

fn syntax_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(PIECES).prop_map(str::to_owned),
            string_regex("[A-Za-z0-9]{1,40}").unwrap(),
            string_regex("[A-Z2-7]{16}").unwrap(),
        ],
        0..40,
    )
    .prop_map(|pieces| pieces.concat())
}

/// Markers in `text`.
fn markers(text: &str) -> usize {
    split_pieces(text).len() - 1
}

/// True when `output` is `input` with disjoint non-empty spans replaced by
/// markers: the text between markers appears in `input`, in order, with a
/// gap where each marker is (the input's own markers are their own gap).
fn only_spans_replaced(input: &str, output: &str) -> bool {
    let pieces = split_pieces(output);
    let (first, rest) = pieces.split_first().unwrap();
    if !input.starts_with(first.as_str()) {
        return false;
    }
    let mut at = first.len();
    for (i, piece) in rest.iter().enumerate() {
        // At least one character replaced before this piece.
        let Some(c) = input[at..].chars().next() else {
            return false;
        };
        let from = at + c.len_utf8();
        if i + 1 == rest.len() {
            return input.len() >= from + piece.len() && input.ends_with(piece.as_str());
        }
        let Some(found) = input[from..].find(piece.as_str()) else {
            return false;
        };
        at = from + found + piece.len();
    }
    at == input.len()
}

/// `text` split at markers (owned pieces).
fn split_pieces(text: &str) -> Vec<String> {
    let mut pieces = vec![String::new()];
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if let Some(after) = rest.strip_prefix(MARKER_PREFIX) {
            let name = after
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
                .count();
            if name > 0 && after.as_bytes().get(name) == Some(&b'>') {
                pieces.push(String::new());
                i += MARKER_PREFIX.len() + name + 1;
                continue;
            }
        }
        let c = rest.chars().next().unwrap();
        pieces.last_mut().unwrap().push(c);
        i += c.len_utf8();
    }
    pieces
}

proptest! {
    #![proptest_config(testkit::proptest_config())]

    #[test]
    fn planted_secrets_never_survive_and_are_counted(
        fragments in prop::collection::vec((fragment(), separator()), 1..12),
    ) {
        let redactor = Redactor::builtin();
        let mut text = String::new();
        let mut expected = String::new();
        let mut planted: BTreeMap<&str, u32> = BTreeMap::new();
        let mut secrets = Vec::new();
        for (fragment, sep) in &fragments {
            match fragment {
                Fragment::Filler(words) => {
                    text.push_str(words);
                    expected.push_str(words);
                }
                Fragment::Planted(i, secret) => {
                    let p = &PLANTS[*i];
                    text.push_str(p.before);
                    text.push_str(secret);
                    text.push_str(p.after);
                    expected.push_str(p.before);
                    expected.push_str(&marker(p.rule));
                    expected.push_str(p.after);
                    *planted.entry(p.rule).or_default() += 1;
                    secrets.push(secret.clone());
                }
            }
            text.push_str(sep);
            expected.push_str(sep);
        }
        let mut counts = Redactions::new();
        let redacted = redactor.redact_counting(&text, &mut counts);
        for secret in &secrets {
            prop_assert!(!redacted.contains(secret.as_str()), "{secret} survived in {redacted}");
        }
        prop_assert_eq!(&*redacted, expected.as_str());
        let counted: BTreeMap<&str, u32> = counts.iter().collect();
        prop_assert_eq!(counted, planted);
        prop_assert_eq!(&*redactor.redact(&redacted), &*redacted);
    }

    #[test]
    fn redaction_is_idempotent_and_only_replaces_spans(text in syntax_text()) {
        let redactor = Redactor::builtin();
        let mut counts = Redactions::new();
        let once = redactor.redact_counting(&text, &mut counts).into_owned();
        let mut again = Redactions::new();
        prop_assert_eq!(redactor.redact_counting(&once, &mut again), once.as_str());
        prop_assert!(again.is_empty());
        prop_assert!(only_spans_replaced(&text, &once), "{text:?} -> {once:?}");
        prop_assert_eq!(
            markers(&once) as u64,
            markers(&text) as u64 + counts.total(),
            "{:?} -> {:?}", text, once
        );
    }

    #[test]
    fn text_without_rule_syntax_is_returned_as_is(text in "\\PC{0,200}") {
        let redactor = Redactor::builtin();
        let once = redactor.redact(&text);
        prop_assert_eq!(&*redactor.redact(&once), &*once);
        prop_assert!(only_spans_replaced(&text, &once));
    }
}
