//! Planted secrets: at least one realistic example of every built-in
//! redaction rule ([`BUILTIN_RULES`](crate::redact::BUILTIN_RULES)), made of
//! deterministic fake material (never real credentials), for the redaction
//! tests of this crate and of the tool crates.

/// Deterministic fake secret material: `n` characters of `alphabet`.
#[must_use]
pub fn fake(alphabet: &str, n: usize, seed: u64) -> String {
    let alphabet: Vec<char> = alphabet.chars().collect();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            alphabet[(state % alphabet.len() as u64) as usize]
        })
        .collect()
}

/// Letters and digits.
pub const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const HEX: &str = "0123456789abcdef";
const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const PASSWORDISH: &str = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789!#%^*+";

/// A planted secret: the text, the secret inside it (once), its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// The built-in rule that finds it.
    pub rule: &'static str,
    /// The text, the secret planted once among realistic words.
    pub text: String,
    /// The secret part: what the marker replaces.
    pub secret: String,
}

fn example(rule: &'static str, before: &str, secret: String, after: &str) -> Example {
    Example {
        rule,
        text: format!("{before}{secret}{after}"),
        secret,
    }
}

/// At least one example of every built-in rule, in realistic surroundings.
#[must_use]
pub fn examples() -> Vec<Example> {
    let s = |alphabet: &str, n: usize, seed: u64| fake(alphabet, n, seed);
    let pem_body = format!("{}\n{}\n{}=", s(B64, 64, 1), s(B64, 64, 2), s(B64, 40, 3));
    vec![
        example(
            "pem_private_key",
            "loaded key:\n-----BEGIN RSA PRIVATE KEY-----\n",
            pem_body.clone(),
            "\n-----END RSA PRIVATE KEY-----\nlistening on :8443",
        ),
        example(
            "pem_private_key",
            "key file begins -----BEGIN OPENSSH PRIVATE KEY-----\n",
            format!("b3BlbnNzaC1rZXktdjEAAAAA{}\n", s(B64, 70, 4)),
            "",
        ),
        example(
            "jwt",
            "rejected token ",
            format!(
                "eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}",
                s(B64URL, 40, 5),
                s(B64URL, 43, 6)
            ),
            " (expired)",
        ),
        example(
            "aws_access_key_id",
            "s3 put denied for AKIA",
            String::new(),
            "",
        ),
        example(
            "github_token",
            "export GITHUB_TOKEN=",
            format!("ghp_{}", s(ALNUM, 36, 8)),
            "\ngit push",
        ),
        example(
            "github_token",
            "using ",
            format!("github_pat_{}_{}", s(ALNUM, 22, 9), s(ALNUM, 59, 10)),
            " for the API",
        ),
        example(
            "gitlab_token",
            "git clone https://oauth2:",
            format!("glpat-{}", s(B64URL, 20, 11)),
            "@gitlab.example.com/ops/runbooks.git",
        ),
        example(
            "slack_token",
            "notifier token ",
            format!(
                "xoxb-{}-{}-{}",
                s("0123456789", 12, 12),
                s("0123456789", 13, 13),
                s(ALNUM, 24, 14)
            ),
            " revoked",
        ),
        example(
            "slack_token",
            "POST https://hooks.slack.com/services/",
            format!(
                "T{}/B{}/{}",
                s(UPPER_ALNUM, 8, 15),
                s(UPPER_ALNUM, 10, 16),
                s(ALNUM, 24, 17)
            ),
            " returned 404",
        ),
        example(
            "stripe_key",
            "charge failed with key ",
            format!("sk_live_{}", s(ALNUM, 24, 18)),
            ": card_declined",
        ),
        example(
            "google_api_key",
            "GET /maps/api/geocode/json?address=Berlin&key=",
            format!("AIza{}", s(B64URL, 35, 19)),
            " 403",
        ),
        example(
            "google_oauth",
            "refresh returned ",
            format!("ya29.{}", s(B64URL, 60, 20)),
            " for scope cloud-platform",
        ),
        example(
            "npm_token",
            "//registry.npmjs.org/:_authToken=",
            format!("npm_{}", s(ALNUM, 36, 21)),
            "\nalways-auth=true",
        ),
        example(
            "pypi_token",
            "password = ",
            format!("pypi-AgEIcHlwaS5vcmc{}", s(B64URL, 70, 22)),
            "\nusername = __token__",
        ),
        example(
            "anthropic_key",
            "x-api-key: ",
            format!("sk-ant-api03-{}AA", s(B64URL, 93, 23)),
            "",
        ),
        example(
            "openai_key",
            "OPENAI_API_KEY=",
            format!("sk-proj-{}", s(B64URL, 64, 24)),
            " python agent.py",
        ),
        example(
            "openai_key",
            "client configured with ",
            format!("sk-{}", s(ALNUM, 48, 25)),
            ", model gpt-4o",
        ),
        example(
            "huggingface_token",
            "hub login with ",
            format!("hf_{}", s(LETTERS, 34, 26)),
            " ok",
        ),
        example(
            "digitalocean_token",
            "doctl auth init -t ",
            format!("dop_v1_{}", s(HEX, 64, 27)),
            "",
        ),
        example(
            "sendgrid_key",
            "mailer key ",
            format!("SG.{}.{}", s(B64URL, 22, 28), s(B64URL, 43, 29)),
            " rejected",
        ),
        example(
            "twilio_api_key",
            "twilio sid ",
            format!("SK{}", s(HEX, 32, 30)),
            " active",
        ),
        example(
            "shopify_token",
            "shop admin ",
            format!("shpat_{}", s(HEX, 32, 31)),
            " scope read_orders",
        ),
        example(
            "databricks_token",
            "workspace token ",
            format!("dapi{}", s(HEX, 32, 32)),
            " expired",
        ),
        example(
            "vault_token",
            "VAULT_TOKEN ",
            format!("hvs.{}", s(B64URL, 90, 33)),
            " renewed",
        ),
        example(
            "terraform_token",
            "credentials app.terraform.io token ",
            format!("{}.atlasv1.{}", s(ALNUM, 14, 34), s(B64URL, 67, 35)),
            "",
        ),
        example(
            "age_secret_key",
            "identity ",
            format!(
                "AGE-SECRET-KEY-1{}",
                s("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58, 36)
            ),
            " loaded",
        ),
        example(
            "grafana_token",
            "grafana sa ",
            format!("glsa_{}_{}", s(ALNUM, 32, 37), s(HEX, 8, 38)),
            " used",
        ),
        example(
            "sentry_token",
            "sentry-cli with ",
            format!("sntryu_{}", s(HEX, 64, 39)),
            " upload",
        ),
        example(
            "doppler_token",
            "doppler ",
            format!("dp.pt.{}", s(ALNUM, 43, 40)),
            " ok",
        ),
        example(
            "linear_key",
            "linear ",
            format!("lin_api_{}", s(ALNUM, 40, 41)),
            " ok",
        ),
        example(
            "planetscale_token",
            "pscale ",
            format!("pscale_tkn_{}", s(B64URL, 43, 42)),
            " ok",
        ),
        example(
            "postman_key",
            "postman ",
            format!("PMAK-{}-{}", s(HEX, 24, 43), s(HEX, 34, 44)),
            " ok",
        ),
        example(
            "pulumi_token",
            "pulumi login with ",
            format!("pul-{}", s(HEX, 40, 45)),
            " ok",
        ),
        example(
            "rubygems_token",
            "gem push with ",
            format!("rubygems_{}", s(HEX, 48, 46)),
            " ok",
        ),
        example(
            "dynatrace_token",
            "oneagent ",
            format!("dt0c01.{}.{}", s(UPPER_ALNUM, 24, 47), s(ALNUM, 64, 48)),
            " ok",
        ),
        example(
            "newrelic_key",
            "newrelic ",
            format!("NRAK-{}", s(UPPER_ALNUM, 27, 49)),
            " ok",
        ),
        example(
            "square_token",
            "square ",
            format!("sq0atp-{}", s(B64URL, 22, 50)),
            " ok",
        ),
        example(
            "atlassian_token",
            "jira ",
            format!("ATATT3{}", s(B64URL, 60, 51)),
            " ok",
        ),
        example(
            "telegram_bot_token",
            "bot ",
            format!("{}:AA{}", s("123456789", 9, 52), s(B64URL, 33, 53)),
            " polling",
        ),
        example(
            "azure_client_secret",
            "client secret ",
            format!("{}8Q~{}", s(ALNUM, 3, 54), s(ALNUM, 34, 55)),
            " set",
        ),
        example(
            "discord_webhook",
            "POST https://discord.com/api/webhooks/123456789012345678/",
            s(B64URL, 68, 56),
            " 204",
        ),
        example(
            "aws_secret_access_key",
            "[default]\naws_secret_access_key = ",
            s(B64, 40, 57),
            "\nregion = eu-west-1",
        ),
        example(
            "jdbc_password",
            "url=jdbc:mysql://db:3306/shop?user=app&password=",
            s(PASSWORDISH, 14, 58),
            "&useSSL=true",
        ),
        example(
            "jdbc_password",
            "connecting jdbc:oracle:thin:scott/",
            s(PASSWORDISH, 12, 59),
            "@//db.internal:1521/ORCL",
        ),
        example(
            "cli_password",
            "$ mysql -h db.internal -u root -p",
            s(PASSWORDISH, 12, 60),
            " shop",
        ),
        example("cli_password", "mysql -p", s(PASSWORDISH, 12, 76), " shop"),
        example(
            "cli_password",
            "redis-cli -h cache -a ",
            s(PASSWORDISH, 16, 61),
            " ping",
        ),
        example(
            "cli_password",
            "curl -s -u admin:",
            s(PASSWORDISH, 16, 62),
            " https://grafana.internal/api/health",
        ),
        example(
            "url_password",
            "calling https://svc:",
            s(PASSWORDISH, 12, 63),
            "@api.internal/v1 failed",
        ),
        example(
            "url_password",
            "REDIS_URL redis://:",
            s(PASSWORDISH, 20, 64),
            "@cache.internal:6379/0",
        ),
        example(
            "authorization_header",
            "curl -H 'Authorization: Bearer ",
            s(ALNUM, 40, 65),
            "' https://api.internal",
        ),
        example(
            "authorization_header",
            "Authorization: Basic ",
            format!("{}==", s(B64, 30, 66)),
            "\nHost: api.internal",
        ),
        example(
            "kv_secret",
            "password=",
            s(PASSWORDISH, 12, 67),
            " user=app",
        ),
        example(
            "kv_secret",
            "db:\n  host: db.internal\n  DB_PASSWORD: ",
            s(PASSWORDISH, 12, 68),
            "\n  port: 5432",
        ),
        example(
            "kv_secret",
            r#"{"client_id": 7, "client_secret": ""#,
            s(PASSWORDISH, 24, 69),
            r#"", "scope": "read"}"#,
        ),
        example(
            "kv_secret",
            "deploy --api-key ",
            s(ALNUM, 20, 70),
            " --verbose",
        ),
        example("kv_secret", "passwd='", s(PASSWORDISH, 10, 71), "'"),
        example("kv_secret", "config.token => \"", s(ALNUM, 30, 72), "\""),
        example(
            "kv_secret",
            "spring.datasource.password: ",
            s(PASSWORDISH, 14, 73),
            "",
        ),
        example(
            "kv_secret",
            r#"{\"accessToken\":\""#,
            s(ALNUM, 32, 74),
            r#"\",\"user\":\"bob\"}"#,
        ),
        example(
            "kv_secret",
            "Server=db;User Id=sa;Password=",
            s(PASSWORDISH, 12, 75),
            ";Encrypt=true",
        ),
        example(
            "kv_secret",
            r#"{"password": ""#,
            "correct horse battery staple".to_owned(),
            r#""}"#,
        ),
    ]
    .into_iter()
    .map(|mut e| {
        if e.rule == "aws_access_key_id" {
            let id = format!("AKIA{}", s("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 7));
            e.text = format!("s3 put denied for {id} on bucket logs");
            e.secret = id;
        }
        e
    })
    .collect()
}

/// `text` as it appears inside a JSON string (escapes, no quotes): what to
/// look for in an observation's or a raw response's JSON text.
#[must_use]
pub fn json_escaped(text: &str) -> String {
    let quoted = serde_json::Value::from(text).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

/// The Model Observation of `outcome` as JSON and as its text, after
/// asserting the call is READY and its observation holds `example`'s secret
/// nowhere (JSON-escaped, as it would stand in the text).
///
/// # Panics
/// When the call is not READY or the secret is in the observation.
#[must_use]
pub fn ready_observation_without(
    outcome: &crate::BoundaryOutcome,
    example: &Example,
) -> (serde_json::Value, String) {
    assert_eq!(
        outcome.control.status,
        aci_contracts::InvocationStatus::Ready,
        "{}",
        example.rule
    );
    let observation = outcome.observation.to_json();
    let text = observation.to_string();
    assert!(
        !text.contains(&json_escaped(&example.secret)),
        "{}: {text}",
        example.rule
    );
    (observation, text)
}

/// The raw response JSON the boundary's store holds for call `id` of `run`
/// (harness-only), read back from the store.
///
/// # Panics
/// When the store fails, the record is missing or has no raw response.
#[allow(clippy::expect_used)] // test support: a failure here is the test's failure
pub async fn stored_raw(
    boundary: &crate::ToolBoundary,
    run: &crate::RunContext,
    id: &str,
) -> String {
    let id = aci_contracts::ToolCallId::new(id).expect("a valid tool call id");
    let key = crate::InvocationKey::new(run.run_id.clone(), id);
    let record = boundary
        .store()
        .get(&key, crate::RecordFields::All)
        .await
        .expect("the store answers")
        .expect("the record exists");
    record.raw_json.expect("the record holds its raw response")
}
