//! The proptest configuration of every property test.

use proptest::test_runner::Config;

/// Cases per property when `PROPTEST_CASES` is not set.
pub const DEFAULT_PROPTEST_CASES: u32 = 64;

/// [`DEFAULT_PROPTEST_CASES`] cases, or `PROPTEST_CASES` when it is set to a
/// number (raise it for a deeper run).
#[must_use]
pub fn proptest_config() -> Config {
    proptest_config_with_default(DEFAULT_PROPTEST_CASES)
}

/// `default` cases, or `PROPTEST_CASES` when it is set to a number: for a
/// property whose cases are much cheaper or dearer than usual.
#[must_use]
pub fn proptest_config_with_default(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default);
    Config::with_cases(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_come_from_the_environment_or_the_default() {
        // The environment is the process's; read it rather than set it.
        let expected = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|value| value.trim().parse().ok());
        assert_eq!(
            proptest_config().cases,
            expected.unwrap_or(DEFAULT_PROPTEST_CASES)
        );
        assert_eq!(proptest_config_with_default(7).cases, expected.unwrap_or(7));
    }
}
