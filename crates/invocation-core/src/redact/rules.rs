//! The built-in rules and the shapes of values that are never secrets: data,
//! in priority order. Their shapes follow gitleaks' default rule set (MIT),
//! reimplemented here; the module docs of [`crate::redact`] list every rule
//! with an example.
//!
//! Writing a rule: `(?-u:\b)` (ASCII word boundary) rather than `\b`, and
//! `(?i-u:...)` for case-insensitive ASCII words, keep the one automaton a
//! DFA on any input, Chinese text included (a Unicode word boundary makes it
//! fall back to a slower engine on non-ASCII text).

/// One built-in rule, in the shape of a rules file's entry
/// ([`RuleSpec`](super::RuleSpec)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinRule {
    /// Stable lowercase name, shown in the marker `<redacted:NAME>` and
    /// counted in `redactions`.
    pub name: &'static str,
    /// The pattern (Rust `regex` syntax).
    pub regex: &'static str,
    /// The capture group that is the secret (see
    /// [`RuleSpec::secret_group`](super::RuleSpec::secret_group)).
    pub secret_group: usize,
    /// The rule is only tried on text that contains one of these (ASCII
    /// case-insensitive unless `case_sensitive_keywords`); every match of
    /// the regex contains one.
    pub keywords: &'static [&'static str],
    /// True when the keywords count only as written: the regex matches
    /// them in that case only.
    pub case_sensitive_keywords: bool,
    /// What it finds, for the docs.
    pub description: &'static str,
}

/// The words a key ends with when it names a secret: `password`, `passwd`,
/// `passphrase`, `pwd`, `secret`, `token`, `credential(s)`, `authorization`,
/// and `api`/`access`/`secret`/`private`/`account`/`encryption`/`signing`/
/// `master`/`client` + `key`. With any prefix (`db_password`,
/// `GITHUB_TOKEN`, `spring.datasource.password`, `clientSecret`,
/// `aws_secret_access_key`), never with a suffix (`password_expiry_days`,
/// `token_count` are not secrets).
macro_rules! secret_key_word {
    () => {
        r"(?:pass(?:word|wd|phrase)|pwd|secret|token|credentials?|authorization|(?:api|access|secret|private|account|encryption|signing|master|client)[_.-]?key)"
    };
}

/// A key (ASCII, case-insensitive) that names a secret.
macro_rules! secret_key {
    () => {
        concat!(r"(?i-u:[a-z0-9_.-]*?", secret_key_word!(), ")")
    };
}

/// A value after a key, as three alternatives (three capture groups):
/// double-quoted (escapes kept, up to an unescaped or escaped closing
/// quote), single-quoted, or `$bare` (the third group).
macro_rules! secret_value {
    ($bare:expr) => {
        concat!(
            r#"(?:\\?"((?:[^"\\\r\n]|\\[^"\r\n])+)|'([^'\r\n]+)|("#,
            $bare,
            "))"
        )
    };
}

/// A bare value: up to whitespace, a quote or a field separator `, ; &`,
/// at least two characters, not starting with `=`, not ending with `.`,
/// `:` or a closing bracket (the end of a sentence or of `(password=x)`).
macro_rules! bare_value {
    () => {
        r#"[^\s"'`,;&<>=][^\s"'`,;&<>]*[^\s"'`,;&<>.:)\]}]"#
    };
}

/// A bare value after `--key `: not a flag, not a lowercase word.
/// `--password hunter2` holds a password; `--password for ... keys` (prose
/// about a flag) does not. A password of lowercase letters only is missed
/// there.
macro_rules! flag_value {
    () => {
        concat!(
            r#"[a-z]+(?:[^a-z\s"'`,;&<>][^\s"'`,;&<>]*[^\s"'`,;&<>.:)\]}]|[^a-z\s"'`,;&<>.:)\]}])"#,
            r#"|[^a-z\s"'`,;&<>=-][^\s"'`,;&<>]*[^\s"'`,;&<>.:)\]}]"#
        )
    };
}

/// A key whose name is a secret, anchored: what a JSON member name or a SQL
/// column name is matched against ([`Redactor::redact_field`](super::Redactor::redact_field)).
pub(crate) const SECRET_KEY_NAME: &str = concat!("^", secret_key!(), "$");

/// The name of the key-value rule, used for values of keys that name a
/// secret ([`Redactor::redact_field`](super::Redactor::redact_field)).
pub(crate) const KV_SECRET: &str = "kv_secret";

/// The built-in rules, most specific first: when two rules find the same
/// secret, the earlier one names it.
pub const BUILTIN_RULES: &[BuiltinRule] = &[
    BuiltinRule {
        name: "pem_private_key",
        regex: r"-----BEGIN[ A-Z0-9_-]{0,64}PRIVATE KEY(?: BLOCK)?-----\s*(\S(?s:.*?))\s*-----END[ A-Z0-9_-]{0,64}PRIVATE KEY(?: BLOCK)?-----|-----BEGIN[ A-Z0-9_-]{0,64}PRIVATE KEY(?: BLOCK)?-----\s*(\S(?s:.*))",
        secret_group: 1,
        keywords: &["-----BEGIN"],
        case_sensitive_keywords: true,
        description: "every line between `-----BEGIN ... PRIVATE KEY-----` and its END line (RSA, EC, OPENSSH, PGP, PKCS#8, encrypted); without an END line, everything after the BEGIN line",
    },
    BuiltinRule {
        name: "jwt",
        regex: r"(?-u:\b)(eyJ[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*)",
        secret_group: 1,
        keywords: &["eyJ"],
        case_sensitive_keywords: true,
        description: "a JSON Web Token: `eyJ...` header, `ey...` payload, signature",
    },
    BuiltinRule {
        name: "aws_access_key_id",
        regex: r"(?-u:\b)((?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z2-7]{16})(?-u:\b)",
        secret_group: 1,
        keywords: &["AKIA", "ASIA", "ABIA", "ACCA", "A3T"],
        case_sensitive_keywords: true,
        description: "an AWS access key id: `AKIA` (or `ASIA`, `ABIA`, `ACCA`, `A3T.`) and 16 base32 characters",
    },
    BuiltinRule {
        name: "github_token",
        regex: r"(?-u:\b)((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})",
        secret_group: 1,
        keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        case_sensitive_keywords: true,
        description: "a GitHub token: `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` and 36 alphanumerics, or a fine-grained `github_pat_...`",
    },
    BuiltinRule {
        name: "gitlab_token",
        regex: r"(?-u:\b)(gl(?:pat|dt|rt|ptt|oas|ft|imt|agent|soat|ffct|cbt)-[0-9A-Za-z_.-]{20,})",
        secret_group: 1,
        keywords: &[
            "glpat-", "gldt-", "glrt-", "glptt-", "gloas-", "glft-", "glimt-", "glagent-",
            "glsoat-", "glffct-", "glcbt-",
        ],
        case_sensitive_keywords: true,
        description: "a GitLab token: `glpat-` (or deploy, runner, trigger, OAuth, feed, mail, agent, SCIM, feature-flag, CI job prefixes) and 20 or more characters",
    },
    BuiltinRule {
        name: "slack_token",
        regex: r"(?-u:\b)(xox[abeoprs]-[0-9A-Za-z-]{10,}|xapp-[0-9]-[0-9A-Za-z-]{10,})|hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/+-]{20,})",
        secret_group: 1,
        keywords: &["xox", "xapp-", "hooks.slack.com"],
        case_sensitive_keywords: true,
        description: "a Slack token (`xoxb-`, `xoxp-`, `xoxa-`, `xoxe-`, `xapp-...`) or the secret path of a `hooks.slack.com` webhook URL",
    },
    BuiltinRule {
        name: "stripe_key",
        regex: r"(?-u:\b)((?:sk|rk|pk)_(?:live|test|prod)_[0-9A-Za-z]{10,}|whsec_[0-9A-Za-z]{24,})",
        secret_group: 1,
        keywords: &["sk_", "rk_", "pk_", "whsec_"],
        case_sensitive_keywords: true,
        description: "a Stripe key: `sk_live_`, `rk_live_`, `pk_live_` (and `_test_`) or a `whsec_` webhook secret",
    },
    BuiltinRule {
        name: "google_api_key",
        regex: r"(?-u:\b)(AIza[0-9A-Za-z_-]{35})",
        secret_group: 1,
        keywords: &["AIza"],
        case_sensitive_keywords: true,
        description: "a Google API key: `AIza` and 35 characters",
    },
    BuiltinRule {
        name: "google_oauth",
        regex: r"(?-u:\b)(GOCSPX-[0-9A-Za-z_-]{28}|ya29\.[0-9A-Za-z_-]{20,})",
        secret_group: 1,
        keywords: &["GOCSPX-", "ya29."],
        case_sensitive_keywords: true,
        description: "a Google OAuth client secret (`GOCSPX-...`) or access token (`ya29....`)",
    },
    BuiltinRule {
        name: "npm_token",
        regex: r"(?-u:\b)(npm_[A-Za-z0-9]{36})",
        secret_group: 1,
        keywords: &["npm_"],
        case_sensitive_keywords: true,
        description: "an npm access token: `npm_` and 36 alphanumerics",
    },
    BuiltinRule {
        name: "pypi_token",
        regex: r"(?-u:\b)(pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,})",
        secret_group: 1,
        keywords: &["pypi-AgE"],
        case_sensitive_keywords: true,
        description: "a PyPI (or TestPyPI) upload token: `pypi-AgEIcHlwaS5vcmc...`",
    },
    BuiltinRule {
        name: "anthropic_key",
        regex: r"(?-u:\b)(sk-ant-(?:api|admin|oat|sid)[0-9]{2}-[A-Za-z0-9_-]{20,})",
        secret_group: 1,
        keywords: &["sk-ant-"],
        case_sensitive_keywords: true,
        description: "an Anthropic key: `sk-ant-api03-...`",
    },
    BuiltinRule {
        name: "openai_key",
        regex: r"(?-u:\b)(sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9]{20,})",
        secret_group: 1,
        keywords: &["sk-"],
        case_sensitive_keywords: true,
        description: "an OpenAI-style key: `sk-proj-...`, `sk-svcacct-...`, or `sk-` and 20 or more alphanumerics",
    },
    BuiltinRule {
        name: "huggingface_token",
        regex: r"(?-u:\b)(hf_[A-Za-z]{34,})",
        secret_group: 1,
        keywords: &["hf_"],
        case_sensitive_keywords: true,
        description: "a Hugging Face token: `hf_` and 34 letters",
    },
    BuiltinRule {
        name: "digitalocean_token",
        regex: r"(?-u:\b)(do[opr]_v1_[a-f0-9]{64})",
        secret_group: 1,
        keywords: &["doo_v1_", "dop_v1_", "dor_v1_"],
        case_sensitive_keywords: true,
        description: "a DigitalOcean token: `dop_v1_`, `doo_v1_`, `dor_v1_` and 64 hex digits",
    },
    BuiltinRule {
        name: "sendgrid_key",
        regex: r"(?-u:\b)(SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})",
        secret_group: 1,
        keywords: &["SG."],
        case_sensitive_keywords: true,
        description: "a SendGrid key: `SG.` 22 `.` 43 characters",
    },
    BuiltinRule {
        name: "twilio_api_key",
        regex: r"(?-u:\b)(SK[0-9a-f]{32})(?-u:\b)",
        secret_group: 1,
        keywords: &["SK"],
        case_sensitive_keywords: true,
        description: "a Twilio API key: `SK` and 32 lowercase hex digits",
    },
    BuiltinRule {
        name: "shopify_token",
        regex: r"(?-u:\b)(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})",
        secret_group: 1,
        keywords: &["shpat_", "shpca_", "shppa_", "shpss_"],
        case_sensitive_keywords: true,
        description: "a Shopify token or shared secret: `shpat_`, `shpca_`, `shppa_`, `shpss_` and 32 hex digits",
    },
    BuiltinRule {
        name: "databricks_token",
        regex: r"(?-u:\b)(dapi[a-f0-9]{32}(?:-[0-9])?)",
        secret_group: 1,
        keywords: &["dapi"],
        case_sensitive_keywords: true,
        description: "a Databricks token: `dapi` and 32 hex digits",
    },
    BuiltinRule {
        name: "vault_token",
        regex: r"(?-u:\b)(hv[sbr]\.[A-Za-z0-9_-]{24,})",
        secret_group: 1,
        keywords: &["hvs.", "hvb.", "hvr."],
        case_sensitive_keywords: true,
        description: "a HashiCorp Vault token: `hvs.`, `hvb.`, `hvr.` and 24 or more characters",
    },
    BuiltinRule {
        name: "terraform_token",
        regex: r"(?-u:\b)([A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,})",
        secret_group: 1,
        keywords: &["atlasv1"],
        case_sensitive_keywords: true,
        description: "a Terraform Cloud token: 14 characters, `.atlasv1.`, 60 or more",
    },
    BuiltinRule {
        name: "age_secret_key",
        regex: r"(AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})",
        secret_group: 1,
        keywords: &["AGE-SECRET-KEY-1"],
        case_sensitive_keywords: true,
        description: "an age secret key: `AGE-SECRET-KEY-1` and 58 bech32 characters",
    },
    BuiltinRule {
        name: "grafana_token",
        regex: r"(?-u:\b)(glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2}|eyJrIjoi[A-Za-z0-9]{70,}={0,2})",
        secret_group: 1,
        keywords: &["glsa_", "glc_", "eyJrIjoi"],
        case_sensitive_keywords: true,
        description: "a Grafana service account token (`glsa_...`), cloud token (`glc_...`) or API key (`eyJrIjoi...`)",
    },
    BuiltinRule {
        name: "sentry_token",
        regex: r"(?-u:\b)(sntry[su]_[A-Za-z0-9+/=_]{40,})",
        secret_group: 1,
        keywords: &["sntrys_", "sntryu_"],
        case_sensitive_keywords: true,
        description: "a Sentry token: `sntrys_...` or `sntryu_...`",
    },
    BuiltinRule {
        name: "doppler_token",
        regex: r"(?-u:\b)(dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,})",
        secret_group: 1,
        keywords: &["dp."],
        case_sensitive_keywords: true,
        description: "a Doppler token: `dp.pt.` (or `st`, `sa`, `ct`, `scim`, `audit`) and 40 or more alphanumerics",
    },
    BuiltinRule {
        name: "linear_key",
        regex: r"(?-u:\b)(lin_api_[A-Za-z0-9]{40})",
        secret_group: 1,
        keywords: &["lin_api_"],
        case_sensitive_keywords: true,
        description: "a Linear API key: `lin_api_` and 40 alphanumerics",
    },
    BuiltinRule {
        name: "planetscale_token",
        regex: r"(?-u:\b)(pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.-]{32,64})",
        secret_group: 1,
        keywords: &["pscale_"],
        case_sensitive_keywords: true,
        description: "a PlanetScale token or password: `pscale_tkn_`, `pscale_oauth_`, `pscale_pw_`",
    },
    BuiltinRule {
        name: "postman_key",
        regex: r"(?-u:\b)(PMAK-[a-f0-9]{24}-[a-f0-9]{34})",
        secret_group: 1,
        keywords: &["PMAK-"],
        case_sensitive_keywords: true,
        description: "a Postman API key: `PMAK-` 24 `-` 34 hex digits",
    },
    BuiltinRule {
        name: "pulumi_token",
        regex: r"(?-u:\b)(pul-[a-f0-9]{40})",
        secret_group: 1,
        keywords: &["pul-"],
        case_sensitive_keywords: true,
        description: "a Pulumi token: `pul-` and 40 hex digits",
    },
    BuiltinRule {
        name: "rubygems_token",
        regex: r"(?-u:\b)(rubygems_[a-f0-9]{48})",
        secret_group: 1,
        keywords: &["rubygems_"],
        case_sensitive_keywords: true,
        description: "a RubyGems API key: `rubygems_` and 48 hex digits",
    },
    BuiltinRule {
        name: "dynatrace_token",
        regex: r"(?-u:\b)(dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64})",
        secret_group: 1,
        keywords: &["dt0c01."],
        case_sensitive_keywords: true,
        description: "a Dynatrace token: `dt0c01.` 24 `.` 64 alphanumerics",
    },
    BuiltinRule {
        name: "newrelic_key",
        regex: r"(?-u:\b)(NR(?:AK|II)-[A-Za-z0-9-]{27,32})",
        secret_group: 1,
        keywords: &["NRAK-", "NRII-"],
        case_sensitive_keywords: true,
        description: "a New Relic user or insert key: `NRAK-...`, `NRII-...`",
    },
    BuiltinRule {
        name: "square_token",
        regex: r"(?-u:\b)(sq0(?:atp|csp)-[0-9A-Za-z_-]{22,60})",
        secret_group: 1,
        keywords: &["sq0atp-", "sq0csp-"],
        case_sensitive_keywords: true,
        description: "a Square access token or secret: `sq0atp-...`, `sq0csp-...`",
    },
    BuiltinRule {
        name: "atlassian_token",
        regex: r"(?-u:\b)(ATATT3[A-Za-z0-9_=-]{40,})",
        secret_group: 1,
        keywords: &["ATATT3"],
        case_sensitive_keywords: true,
        description: "an Atlassian API token: `ATATT3...`",
    },
    BuiltinRule {
        name: "telegram_bot_token",
        regex: r"(?-u:\b)([0-9]{8,10}:AA[0-9A-Za-z_-]{33})",
        secret_group: 1,
        keywords: &[":AA"],
        case_sensitive_keywords: true,
        description: "a Telegram bot token: 8 to 10 digits, `:AA`, 33 characters",
    },
    BuiltinRule {
        name: "azure_client_secret",
        regex: r"(?:^|[^A-Za-z0-9_~.-])([A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34})",
        secret_group: 1,
        keywords: &["Q~"],
        case_sensitive_keywords: true,
        description: "an Azure AD client secret: 3 characters, a digit, `Q~`, 31 to 34 characters",
    },
    BuiltinRule {
        name: "discord_webhook",
        regex: r"(?i-u:discord(?:app)?\.com/api/webhooks/)[0-9]+/([A-Za-z0-9_-]{60,})",
        secret_group: 1,
        keywords: &["discord"],
        case_sensitive_keywords: false,
        description: "the token part of a Discord webhook URL",
    },
    BuiltinRule {
        name: "aws_secret_access_key",
        regex: r#"(?i-u:(?:aws_?)?secret_?access_?key)["']?[ \t]*[=:][ \t]*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+]|$)"#,
        secret_group: 1,
        keywords: &["secret"],
        case_sensitive_keywords: false,
        description: "an AWS secret access key (40 base64 characters) after `aws_secret_access_key`, `AWS_SECRET_ACCESS_KEY` or `SecretAccessKey`",
    },
    BuiltinRule {
        name: "jdbc_password",
        regex: r#"(?i-u:jdbc:[a-z0-9]+:)[^\s"'<>]*?[?&;](?i-u:password|pwd)=([^&;\s"'<>]+)|(?i-u:jdbc:oracle:thin:)[^/\s@:"'<>]+/([^@\s"'<>]+)@"#,
        secret_group: 1,
        keywords: &["jdbc:"],
        case_sensitive_keywords: false,
        description: "the password of a JDBC URL: `jdbc:...?user=u&password=SECRET`, `jdbc:sqlserver://h;password=SECRET`, `jdbc:oracle:thin:user/SECRET@host`",
    },
    BuiltinRule {
        name: "cli_password",
        regex: r#"(?-u:\b)(?:mysql|mariadb|mysqldump|mariadb-dump|mysqladmin|mariadb-admin)[ \t](?:[^\n|;&]*?[ \t])?-p["']?([^\s"'-][^\s"']*)|(?-u:\b)redis-cli[ \t](?:[^\n|;&]*?[ \t])?(?:-a|--pass)[ \t]+["']?([^\s"'-][^\s"']*)|(?-u:\b)curl[ \t](?:[^\n|;&]*?[ \t])?(?:-u|--user)[ \t=]+["']?[^\s:"']*:([^\s"']+)|(?-u:\b)sshpass[ \t]+-p[ \t]*["']?([^\s"'-][^\s"']*)"#,
        secret_group: 1,
        keywords: &["mysql", "mariadb", "redis-cli", "curl", "sshpass"],
        case_sensitive_keywords: false,
        description: "a password on a command line: `mysql -pSECRET`, `redis-cli -a SECRET`, `curl -u user:SECRET`, `sshpass -p SECRET`",
    },
    BuiltinRule {
        name: "url_password",
        regex: r#"(?-u:\b)(?i-u:[a-z][a-z0-9+.-]*)://[^\s:@/?#"'<>]*:([^\s/?"'<>]+)@"#,
        secret_group: 1,
        keywords: &["://"],
        case_sensitive_keywords: false,
        description: "the password in a URL's userinfo, any scheme: `https://svc:SECRET@api.internal/v1`, `redis://:SECRET@cache:6379`",
    },
    BuiltinRule {
        name: "authorization_header",
        regex: r#"(?i-u:(?:proxy-)?authorization)["']?[ \t]*[:=][ \t]*["']?(?i-u:bearer|basic|token|bot|apikey|api-key)[ \t]+([A-Za-z0-9._~+/=:-]{6,})|(?-u:\b)(?:Bearer|bearer|BEARER)[ \t]+([A-Za-z0-9._~+/-]{16,}=*)"#,
        secret_group: 1,
        keywords: &["authorization", "bearer"],
        case_sensitive_keywords: false,
        description: "the credentials of an `Authorization: Bearer|Basic|Token ...` header, and of a bare `Bearer ...` of 16 or more characters",
    },
    BuiltinRule {
        name: KV_SECRET,
        regex: concat!(
            // "key": value, 'key' => value (JSON, Python, Ruby)
            r#"["']"#,
            secret_key!(),
            r#"\\?["'][ \t]*(?::|=>?)[ \t]*"#,
            secret_value!(bare_value!()),
            // key=value, key = value, key := value, key => value
            r"|(?-u:\b)",
            secret_key!(),
            r"[ \t]*(?:=>?|:=)[ \t]*",
            secret_value!(bare_value!()),
            // key: value at the start of a line or a field (YAML, headers);
            // a bare value must end the field: in `passwd: files systemd`
            // (nsswitch) or `get_master_secret: ADDED.` (a changelog) what
            // follows the key is prose, not a value
            r"|(?:(?m:^)|[,;{(\[|\t])[ \t]*(?:[-#][ \t]*)?",
            secret_key!(),
            r"[ \t]*:[ \t]+",
            secret_value!(concat!(bare_value!(), r")[ \t\r]*(?:(?m:$)|[,;}\]#|]")),
            // --key value (a command-line flag)
            r#"|(?:(?m:^)|[ \t])--(?i-u:[a-z0-9-]*?"#,
            secret_key_word!(),
            r")[ \t]+",
            secret_value!(flag_value!()),
        ),
        secret_group: 1,
        // Every name `secret_key_word!` matches holds one: `key` alone (a
        // cache key, a primary key) is no secret's name.
        keywords: &[
            "password",
            "passwd",
            "passphrase",
            "pwd",
            "secret",
            "token",
            "credential",
            "authorization",
            "apikey",
            "api_key",
            "api.key",
            "api-key",
            "accesskey",
            "access_key",
            "access.key",
            "access-key",
            "privatekey",
            "private_key",
            "private.key",
            "private-key",
            "accountkey",
            "account_key",
            "account.key",
            "account-key",
            "encryptionkey",
            "encryption_key",
            "encryption.key",
            "encryption-key",
            "signingkey",
            "signing_key",
            "signing.key",
            "signing-key",
            "masterkey",
            "master_key",
            "master.key",
            "master-key",
            "clientkey",
            "client_key",
            "client.key",
            "client-key",
        ],
        case_sensitive_keywords: false,
        description: "the value of a key that names a secret, in `key=value`, `key: value`, `\"key\": \"value\"` and `--key value` forms",
    },
];

/// Shapes of values that are never secrets, whichever rule found them:
/// placeholders, template and environment references, masks, flags and
/// paths. Matched against the whole secret part. A value made of one
/// repeated character (`********`, `xxxx`, `a`) is never a secret either.
pub const NON_SECRET_SHAPES: &[&str] = &[
    // Words that stand for no value, name the scheme rather than the
    // credentials (`authorization: Bearer ...`), a type (`password: string`)
    // or a status (`get_master_secret: Added` in a changelog).
    r"(?i)^(?:true|false|null|nil|none|undefined|yes|no|on|off|empty|n/a|na|tbd|todo|required|optional|redacted|filtered|masked|hidden|unset|not[ _-]?set|bearer|basic|token|digest|negotiate|string|str|int|integer|bool|boolean|number|object|any|invalid|expired|missing|provided|added|removed|deprecated|changed|updated|fixed|new|enabled|disabled|supported|unsupported|ignored|ok|failed|denied|accepted|rejected)$",
    // Environment and template references: $VAR, ${VAR}, $(cmd ...), $1,
    // %VAR%, %(name)s, %s, {{ .Values.x }}, {name}, {0}, @VAR@.
    r"^\$[A-Za-z_][A-Za-z0-9_]*$",
    r"^\$\{[^}]*\}?$",
    r"^\$\(",
    r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?(?:/|::)",
    r"^\$[0-9]+$",
    r"^%[A-Za-z_][A-Za-z0-9_]*%$",
    r"^%\([A-Za-z_][A-Za-z0-9_]*\)[sdr]$",
    r"^%[-+ #0]?[0-9]*[sdvqxXfg]$",
    r"^\{\{",
    r"^\{[A-Za-z0-9_.]*\}?$",
    r"^@[A-Za-z_][A-Za-z0-9_]*@$",
    // Descriptions of a value: <password>, [FILTERED], your_api_key.
    r"^<[^<>]*>?$",
    r"(?i)^\[(?:redacted|filtered|hidden|masked|secure|secret|sensitive)\]?$",
    r"(?i)^your[_-]?[a-z_-]+$",
    // Masks that keep a few characters: ****1234, ab***.
    r"^[^*]{0,4}\*{3,}[^*]{0,4}$",
    // Paths: PWD=/root, password_file=/run/secrets/db, ~/.pgpass, ./key.
    r"^/(?:bin|boot|dev|etc|home|lib|lib64|media|mnt|opt|proc|root|run|sbin|srv|sys|tmp|usr|var|data|secrets?)(?:/[A-Za-z0-9_.@+-]*)*$",
    r"^~/[^\s]*$",
    r"^\.\.?/[^\s]*$",
];
