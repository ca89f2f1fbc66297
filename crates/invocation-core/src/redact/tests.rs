//! Every rule on a planted example; what must stay; the engine's guarantees;
//! configuration errors.

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde_json::json;

use super::*;
use crate::testing::secrets::{ALNUM, examples, fake};

/// A rule of one's own: the whole match is the secret, no keywords.
fn spec(name: &str, regex: &str) -> RuleSpec {
    RuleSpec {
        name: name.into(),
        regex: regex.into(),
        secret_group: None,
        keywords: vec![],
        case_sensitive_keywords: false,
        description: None,
    }
}

#[test]
fn every_builtin_rule_has_an_example_and_every_example_a_rule() {
    let ruled: BTreeSet<&str> = BUILTIN_RULES.iter().map(|r| r.name).collect();
    let exemplified: BTreeSet<&str> = examples().iter().map(|e| e.rule).collect();
    assert_eq!(ruled, exemplified);
}

#[test]
fn each_planted_secret_is_replaced_by_its_marker_and_nothing_else_changes() {
    let redactor = Redactor::builtin();
    for e in examples() {
        assert_eq!(e.text.matches(&e.secret).count(), 1, "{}", e.text);
        let mut counts = Redactions::new();
        let redacted = redactor.redact_counting(&e.text, &mut counts);
        let expected = e.text.replacen(&e.secret, &marker(e.rule), 1);
        assert_eq!(redacted, expected, "rule {}", e.rule);
        assert_eq!(
            counts.iter().collect::<Vec<_>>(),
            vec![(e.rule, 1)],
            "{}",
            e.text
        );
        assert_eq!(redactor.redact(&redacted), redacted, "idempotent");
    }
}

#[test]
fn each_example_holds_a_keyword_of_its_rule() {
    for e in examples() {
        let rule = BUILTIN_RULES.iter().find(|r| r.name == e.rule).unwrap();
        let lower = e.text.to_ascii_lowercase();
        assert!(
            rule.keywords
                .iter()
                .any(|k| if rule.case_sensitive_keywords {
                    e.text.contains(k)
                } else {
                    lower.contains(k)
                }),
            "{}: {}",
            e.rule,
            e.text
        );
    }
}

#[test]
fn builtin_names_are_valid_unique_and_listed_in_the_module_docs() {
    let docs = include_str!("mod.rs");
    let mut seen = BTreeSet::new();
    for rule in BUILTIN_RULES {
        assert!(seen.insert(rule.name), "{} twice", rule.name);
        assert!(
            docs.contains(&format!("| `{}` |", rule.name)),
            "{} is not in the rule table of redact/mod.rs",
            rule.name
        );
    }
    assert_eq!(
        Redactor::builtin().rule_names().collect::<Vec<_>>(),
        BUILTIN_RULES.iter().map(|r| r.name).collect::<Vec<_>>()
    );
}

/// Lines that hold words secrets are named by, but no secret.
const NOT_SECRETS: &[&str] = &[
    "password_expiry_days=90",
    "token_count=5 max_tokens=4096",
    "Access denied for user 'app'@'10.0.0.7' (using password: YES)",
    "sudo: bob : TTY=pts/0 ; PWD=/home/bob ; USER=root ; COMMAND=/bin/ls",
    "Failed password for invalid user admin from 10.0.0.1 port 22 ssh2",
    "2024-01-01 status installed passwd:amd64 1:4.13+dfsg1-1",
    "GET https://example.com:8443/api/v1/items?page=2 200",
    "git@github.com:org/repo.git ssh://git@host.example:22/srv/repo",
    "mysqld --password-file /run/secrets/db --port=3306",
    r#"{"password": null, "token": "", "secret": true}"#,
    "password: ${DB_PASSWORD}",
    "password = \"{{ .Values.db.password }}\"",
    "curl -H \"Authorization: Bearer $TOKEN\" https://api.internal",
    "export PGPASSWORD=$(cat /run/secrets/pg)",
    "token: <your-token-here>",
    "api_key=YOUR_API_KEY",
    "password: ********",
    "card ****4242 declined",
    "password_encryption = scram-sha-256",
    "the invalid token: signature mismatch",
    "pip install scikit-learn sk-learn-extensions-for-the-win",
    "disk-usage-for-the-mounted-volumes exceeded",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "request 3f2b9c1e-7d4a-4b8e-9f3a-2c1d0e9b8a7f done",
    "cookie hash    : aY+9g8SrnCvVnOomZr+pYA==",
    "Authorization header missing",
    "requirepass foobared",
    "mysql -u root -p shop < dump.sql",
    "secret_name=db-credentials secretRef: db-credentials",
    "kind: Secret",
    "--token-file /var/run/secrets/token",
    "password: string  # the user's password",
    "passwd:         files systemd",
    "gnutls_session_get_master_secret: ADDED.",
    "gnutls_ia_allocate_client_credentials: REMOVED",
    "    test-token: Skip if the path is actually writable",
    "** certtool: Added option --null-password to generate/decrypt keys",
    "Earlier it would have prompted the user for it, even if --password was",
    "private_key\t= $dir/private/cakey.pem# The private key",
    "secret = $insta::secret # pass:insta",
];

#[test]
fn key_colon_value_must_end_its_field_and_flags_take_no_words() {
    let redactor = Redactor::builtin();
    for (text, expected) in [
        (
            "password: s3cr3t-Pw # rotated",
            "password: <redacted:kv_secret> # rotated",
        ),
        (
            "{token: abc123XY, user: bob}",
            "{token: <redacted:kv_secret>, user: bob}",
        ),
        (
            "X-Api-Key: 5f3c9a1b\r\n",
            "X-Api-Key: <redacted:kv_secret>\r\n",
        ),
        (
            "Password: hunter2 (from the vault)",
            "Password: hunter2 (from the vault)",
        ),
        (
            "tool --password Hunter2 --user bob",
            "tool --password <redacted:kv_secret> --user bob",
        ),
        ("tool --token s3cr3t", "tool --token <redacted:kv_secret>"),
        ("tool --password hunter", "tool --password hunter"),
    ] {
        assert_eq!(redactor.redact(text), expected);
    }
}

#[test]
fn lines_without_secrets_stay_as_they_are() {
    let redactor = Redactor::builtin();
    for line in NOT_SECRETS {
        assert_eq!(redactor.redact(line), *line);
        assert!(matches!(redactor.redact(line), Cow::Borrowed(_)));
    }
}

#[test]
fn nothing_to_redact_borrows() {
    let redactor = Redactor::builtin();
    let text = "2024-06-01T12:00:00Z INFO connection pool size=10 active=3";
    assert!(matches!(redactor.redact(text), Cow::Borrowed(_)));
    let mut value = json!({"rows": [[1, "a"], [2, "b"]], "password": null});
    let before = value.clone();
    let mut counts = Redactions::new();
    redactor.redact_json(&mut value, &mut counts);
    assert_eq!(value, before);
    assert!(counts.is_empty());
}

#[test]
fn markers_are_never_matched_again() {
    let redactor = Redactor::builtin();
    for text in [
        "password=<redacted:kv_secret>",
        "https://svc:<redacted:url_password>@api.internal/v1",
        "Authorization: Bearer <redacted:authorization_header>",
        r#"{"token": "<redacted:github_token>"}"#,
    ] {
        assert_eq!(redactor.redact(text), text);
    }
    // A rule of one's own that matches the marker's words does not either.
    let greedy = spec("words", "[a-z_:]{12,}");
    let redactor = Redactor::new(&[greedy], Vec::<String>::new()).unwrap();
    let once = redactor.redact("password=hunter2hunter2 and somethinglong");
    assert_eq!(once, "password=<redacted:kv_secret> and <redacted:words>");
    assert_eq!(redactor.redact(&once), once);
}

#[test]
fn overlapping_finds_merge_into_one_marker_named_by_the_leftmost_longest() {
    let redactor = Redactor::builtin();
    // The same span: the earlier (more specific) rule names it.
    let token = format!("ghp_{}", fake(ALNUM, 36, 90));
    assert_eq!(
        redactor.redact(&format!("password={token}")),
        "password=<redacted:github_token>"
    );
    // A longer span containing a shorter one: the longer names it.
    let mut counts = Redactions::new();
    let text = format!(r#"{{"token": "Bearer {token}"}}"#);
    assert_eq!(
        redactor.redact_counting(&text, &mut counts),
        r#"{"token": "<redacted:kv_secret>"}"#
    );
    assert_eq!(counts.iter().collect::<Vec<_>>(), vec![("kv_secret", 1)]);
}

#[test]
fn allowlisted_values_stay() {
    let id = format!("AKIA{}", fake("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 91));
    let text = format!("key {id} and password=guest");
    let config = RedactionConfig {
        rules_file: None,
        allow: vec![id.clone(), "guest".into()],
    };
    let redactor = config.redactor(&[]).unwrap();
    assert_eq!(redactor.redact(&text), text);
    assert_eq!(
        Redactor::builtin().redact(&text),
        "key <redacted:aws_access_key_id> and password=<redacted:kv_secret>"
    );
}

#[test]
fn extra_rules_from_a_rules_file_redact_their_secret_group() {
    let file: RulesFile = toml::from_str(
        r#"
        [[rules]]
        name = "acme_token"
        regex = '''(?-u:\b)acme_(?:live|test)_([a-z0-9]{16})'''
        keywords = ["ACME_"]
        description = "ACME API tokens"

        [[rules]]
        name = "employee_id"
        regex = '''EMP-[0-9]{6}'''
        "#,
    )
    .unwrap();
    let config: RedactionConfig = toml::from_str(
        r#"
        rules_file = "/etc/aci/rules.toml"
        allow = ["EMP-000000"]
        "#,
    )
    .unwrap();
    let redactor = config.redactor(&file.rules).unwrap();
    let mut counts = Redactions::new();
    let text = "acme_live_0123456789abcdef by EMP-123456, EMP-000000, acme_test_short";
    assert_eq!(
        redactor.redact_counting(text, &mut counts),
        "acme_live_<redacted:acme_token> by <redacted:employee_id>, EMP-000000, acme_test_short"
    );
    assert_eq!(counts.get("acme_token"), 1);
    assert_eq!(counts.get("employee_id"), 1);
    // Keywords gate a rule: without one, it is not tried.
    let gated = RuleSpec {
        keywords: vec!["pin".into()],
        ..spec("gated", "[0-9]{6}")
    };
    let redactor = Redactor::new(&[gated], Vec::<String>::new()).unwrap();
    assert_eq!(redactor.redact("order 123456"), "order 123456");
    assert_eq!(redactor.redact("PIN 123456"), "PIN <redacted:gated>");
}

#[test]
fn a_keyword_that_a_marker_brings_is_looked_for_in_the_next_pass() {
    // A rule whose keyword is in no text here but in `kv_secret`'s marker
    // (`<redacted:kv_secret>` holds `secret`), and whose matches lack it: the
    // first pass does not try it; redacting the output again would. The
    // second pass must look for keywords around the new marker too, or
    // the output is not a fixed point.
    let lax = RuleSpec {
        keywords: vec!["secret".into()],
        ..spec("lax", "zz[a-z]{4}")
    };
    let redactor = Redactor::new(&[lax], Vec::<String>::new()).unwrap();
    let mut counts = Redactions::new();
    let once = redactor.redact_counting("zzabcd password=hunter2x zzefgh", &mut counts);
    assert_eq!(
        once,
        "<redacted:lax> password=<redacted:kv_secret> <redacted:lax>"
    );
    assert_eq!(counts.get("lax"), 2);
    assert_eq!(redactor.redact(&once), once);
    // Far from the marker (past the longest keyword) as well.
    let far = format!("password=hunter2x {} zzefgh", "w ".repeat(300));
    let once = redactor.redact(&far);
    assert!(once.ends_with("<redacted:lax>"), "{once}");
    assert_eq!(redactor.redact(&once), once);
}

#[test]
fn unknown_keys_in_config_and_rules_are_refused() {
    assert!(toml::from_str::<RedactionConfig>("allowlist = []").is_err());
    assert!(
        toml::from_str::<RulesFile>("[[rules]]\nname = \"a\"\nregex = \"a\"\nsecretgroup = 0")
            .is_err()
    );
}

#[test]
fn bad_rules_are_configuration_errors_naming_the_rule() {
    let rule = |name: &str, regex: &str, group: Option<usize>| RuleSpec {
        secret_group: group,
        ..spec(name, regex)
    };
    let refused = |rules: &[RuleSpec]| Redactor::new(rules, Vec::<String>::new()).unwrap_err();
    let cases = [
        (
            vec![rule("Bad-Name", "x", None)],
            "REDACTION_RULE_INVALID_NAME",
            "Bad-Name",
        ),
        (vec![rule("", "x", None)], "REDACTION_RULE_INVALID_NAME", ""),
        (
            vec![rule(&"a".repeat(65), "x", None)],
            "REDACTION_RULE_INVALID_NAME",
            &*"a".repeat(65),
        ),
        (
            vec![rule("jwt", "x", None)],
            "REDACTION_RULE_DUPLICATE_NAME",
            "jwt",
        ),
        (
            vec![rule("mine", "x", None), rule("mine", "y", None)],
            "REDACTION_RULE_DUPLICATE_NAME",
            "mine",
        ),
        (
            vec![rule("broken", "a(b", None)],
            "REDACTION_RULE_INVALID_REGEX",
            "broken",
        ),
        (
            vec![rule("empty", "a*", None)],
            "REDACTION_RULE_MATCHES_EMPTY",
            "empty",
        ),
        (
            vec![rule("anchor", "(?m)^", None)],
            "REDACTION_RULE_MATCHES_EMPTY",
            "anchor",
        ),
        (
            vec![rule("group", "a(b)", Some(2))],
            "REDACTION_RULE_INVALID_SECRET_GROUP",
            "group",
        ),
        (
            vec![rule("maybe", "key=(b*)", Some(1))],
            "REDACTION_RULE_EMPTY_SECRET",
            "maybe",
        ),
    ];
    for (rules, code, name) in cases {
        let error = refused(&rules);
        assert_eq!(error.code(), code, "{error}");
        assert_eq!(error.rule(), Some(name));
        assert!(error.to_string().contains(&format!("`{name}`")), "{error}");
    }
    let keyword = RuleSpec {
        keywords: vec![String::new()],
        ..rule("kw", "x", None)
    };
    assert_eq!(refused(&[keyword]).code(), "REDACTION_RULE_EMPTY_KEYWORD");
    let error = Redactor::new(&[], vec![String::new()]).unwrap_err();
    assert_eq!(error.code(), "REDACTION_ALLOW_EMPTY_VALUE");
    assert_eq!(error.rule(), None);
}

#[test]
fn the_secret_is_the_first_non_empty_group_from_the_configured_one() {
    let rule = RuleSpec {
        secret_group: Some(1),
        ..spec("either", r"key1=([0-9]+)|key2=([a-z]+)")
    };
    let whole = spec("whole", r"serial=[0-9]{4}");
    let redactor = Redactor::new(&[rule, whole], Vec::<String>::new()).unwrap();
    assert_eq!(
        redactor.redact("key1=1234 key2=abcd serial=9876"),
        "key1=<redacted:either> key2=<redacted:either> <redacted:whole>"
    );
}

#[test]
fn case_sensitive_keywords_count_only_as_written() {
    let rule = |name: &str, exact: bool| RuleSpec {
        keywords: vec!["ACME_".into()],
        case_sensitive_keywords: exact,
        ..spec(name, r"(?i)acme_([a-z0-9]{8})")
    };
    let exact = Redactor::new(&[rule("acme", true)], Vec::<String>::new()).unwrap();
    assert_eq!(exact.redact("ACME_abcd1234"), "ACME_<redacted:acme>");
    // The regex would match; the keyword is not there as written.
    assert_eq!(exact.redact("acme_abcd1234"), "acme_abcd1234");
    assert!(!exact.may_hold_secrets("acme_abcd1234"));
    let any_case = Redactor::new(&[rule("acme", false)], Vec::<String>::new()).unwrap();
    assert_eq!(any_case.redact("acme_abcd1234"), "acme_<redacted:acme>");

    // The built-in shapes' keywords are case-sensitive where their regexes
    // are: `sk` in `task` or `sku` does not make a text worth searching.
    let builtin = Redactor::builtin();
    for clean in [
        "Scheduled task report-export-3 completed",
        r#"{"sku": "A-1", "qty": 2}"#,
        "shipping to Asia",
    ] {
        assert!(!builtin.may_hold_secrets(clean), "{clean}");
    }
    assert_eq!(
        builtin.redact("key SK0123456789abcdef0123456789abcdef"),
        "key <redacted:twilio_api_key>"
    );
}

#[test]
fn fields_named_for_secrets_are_redacted_whole() {
    let redactor = Redactor::builtin();
    let mut counts = Redactions::new();
    assert_eq!(
        redactor.redact_field("password", "hunter2", &mut counts),
        "<redacted:kv_secret>"
    );
    assert_eq!(
        redactor.redact_field("api_token", "two words", &mut counts),
        "<redacted:kv_secret>"
    );
    let token = format!("ghp_{}", fake(ALNUM, 36, 92));
    assert_eq!(
        redactor.redact_field("GITHUB_TOKEN", &token, &mut counts),
        "<redacted:github_token>"
    );
    // Placeholders and blanks stay; other columns get the text rules.
    assert_eq!(
        redactor.redact_field("password", "NULL", &mut counts),
        "NULL"
    );
    assert_eq!(redactor.redact_field("password", "", &mut counts), "");
    assert_eq!(
        redactor.redact_field("password_changed_at", "2024-01-01", &mut counts),
        "2024-01-01"
    );
    assert_eq!(
        redactor.redact_field("note", &format!("token {token}"), &mut counts),
        "token <redacted:github_token>"
    );
    assert_eq!(counts.get("kv_secret"), 2);
    assert_eq!(counts.get("github_token"), 2);
    for key in [
        "password",
        "DB_PASSWORD",
        "accessToken",
        "client_secret",
        "aws_secret_access_key",
        "X-Api-Key",
        "credentials",
    ] {
        assert!(redactor.names_secret(key), "{key}");
    }
    for key in [
        "password_expiry_days",
        "token_count",
        "keys",
        "secret_name",
        "user",
        "primary_key",
    ] {
        assert!(!redactor.names_secret(key), "{key}");
    }
}

#[test]
fn json_values_are_redacted_in_place_without_losing_a_member() {
    let redactor = Redactor::builtin();
    let token = format!("ghp_{}", fake(ALNUM, 36, 93));
    let mut value = json!({
        "user": "app",
        "password": "hunter2",
        "pin_code": 1234,
        "api_key": 987654321,
        "tokens": ["a", "b"],
        "credentials": ["s3cr3t-one", null],
        "nested": {"log": format!("calling https://svc:pw-123456@api.internal/v1 with {token}")},
        token.clone(): "a secret as a member name",
        format!("ghp_{}", fake(ALNUM, 36, 94)): "another",
        "enabled": true
    });
    let mut counts = Redactions::new();
    redactor.redact_json(&mut value, &mut counts);
    let members = value.as_object_mut().unwrap();
    let renamed: serde_json::Map<String, serde_json::Value> = members
        .keys()
        .filter(|k| k.starts_with(MARKER_PREFIX))
        .cloned()
        .collect::<Vec<_>>()
        .into_iter()
        .map(|k| {
            let v = members.remove(&k).unwrap();
            (k, v)
        })
        .collect();
    assert_eq!(
        value,
        json!({
            "user": "app",
            "password": "<redacted:kv_secret>",
            "pin_code": 1234,
            "api_key": "<redacted:kv_secret>",
            "tokens": ["a", "b"],
            "credentials": ["<redacted:kv_secret>", null],
            "nested": {"log": "calling https://svc:<redacted:url_password>@api.internal/v1 with <redacted:github_token>"},
            "enabled": true
        })
    );
    // Two member names that redact alike: both kept, told apart.
    let mut names: Vec<(&str, &str)> = renamed
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
        .collect();
    names.sort_by_key(|(_, v)| *v);
    let keys: BTreeSet<&str> = names.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["<redacted:github_token>", "<redacted:github_token> (2)"])
    );
    assert_eq!(
        names.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
        vec!["a secret as a member name", "another"]
    );
    assert_eq!(counts.get("kv_secret"), 3);
    assert_eq!(counts.get("url_password"), 1);
    assert_eq!(counts.get("github_token"), 3);
}

#[test]
fn debug_shows_rule_names_only() {
    let redactor = Redactor::new(&[], vec!["hunter2".to_owned()]).unwrap();
    let debug = format!("{redactor:?}");
    assert!(debug.contains("kv_secret"));
    assert!(!debug.contains("hunter2"));
}

#[test]
fn may_hold_secrets_is_true_for_every_example_and_every_secret_name() {
    let redactor = Redactor::builtin();
    for e in examples() {
        assert!(redactor.may_hold_secrets(&e.text), "{}", e.text);
    }
    for name in [
        "password",
        "DB_PASSWD",
        "apiKey",
        "client_secret",
        "X-Auth-Token",
    ] {
        assert!(redactor.names_secret(name), "{name}");
        assert!(
            redactor.may_hold_secrets(&format!("{{\"{name}\": 1}}")),
            "{name}"
        );
    }
    // No keyword of any rule (note `sku` would hold `sk`, Twilio's).
    assert!(!redactor.may_hold_secrets(r#"{"order_id": 7, "items": [{"code": "A-7"}]}"#));
}

proptest::proptest! {
    /// A caller may skip parsing JSON that holds no keyword
    /// ([`Redactor::may_hold_secrets`]): every member name that names a
    /// secret holds one of `kv_secret`'s keywords, in any case.
    #[test]
    fn every_secret_name_holds_a_kv_secret_keyword(
        name in "[a-z0-9_.-]{0,6}(password|passwd|passphrase|pwd|secret|token|credentials?|authorization|(api|access|secret|private|account|encryption|signing|master|client)[_.-]?key)",
        upper in proptest::collection::vec(proptest::bool::ANY, 40),
    ) {
        let name: String = name
            .chars()
            .zip(upper.iter().cycle())
            .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
            .collect();
        let redactor = Redactor::builtin();
        proptest::prop_assert!(redactor.names_secret(&name), "{}", name);
        let kv = BUILTIN_RULES.iter().find(|r| r.name == "kv_secret").unwrap();
        let lower = name.to_ascii_lowercase();
        proptest::prop_assert!(kv.keywords.iter().any(|k| lower.contains(k)), "{}", name);
        let json = format!(r#"{{"{name}": "hunter2x"}}"#);
        proptest::prop_assert!(redactor.may_hold_secrets(&json), "{}", json);
    }
}

#[test]
fn thousands_of_keywords_give_the_same_result_without_the_automata() {
    // A few hundred keywords build the automata; far more (see
    // `filter::limits`) and every text is tried with every rule, and finds
    // the same.
    let mut rng = fastrand::Rng::with_seed(7);
    for (count, gives_up) in [(500, false), (40_000, true)] {
        let mut keywords: Vec<String> = (0..count)
            .map(|_| (0..12).map(|_| rng.alphanumeric()).collect())
            .collect();
        keywords.push("acme_".into());
        let rule = RuleSpec {
            keywords,
            ..spec("acme", r"acme_([0-9]{6})")
        };
        let redactor = Redactor::new(&[rule], Vec::<String>::new()).unwrap();
        assert_eq!(
            redactor.keyword_automata_gave_up(),
            (gives_up, gives_up),
            "{count} keywords"
        );
        assert_eq!(
            redactor.redact("id acme_123456 ok"),
            "id acme_<redacted:acme> ok"
        );
        assert_eq!(redactor.redact("plain text"), "plain text");
        assert_eq!(
            redactor.redact("export GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ012345"),
            "export GITHUB_TOKEN=<redacted:github_token>"
        );
    }
}

#[test]
fn json_with_escapes_may_hold_secrets() {
    let redactor = Redactor::builtin();
    for json in [
        r#"{"api\u005fkey": "hunter2xyz"}"#,
        r#"{"passw\u006frd": "x9"}"#,
        r#"\u0070"#,
        r#"{"a": "\\", "b\u0070": 1}"#,
    ] {
        assert!(redactor.may_hold_secrets(json), "{json}");
    }
    for json in [
        r#"{"order_id": 7, "note": "a\nb"}"#,
        r#"{"path": "C:\\tmp\\"}"#,
        "ends with a backslash \\",
        "\\",
    ] {
        assert!(!redactor.may_hold_secrets(json), "{json}");
    }
}
