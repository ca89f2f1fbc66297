//! How a bob session maps to a run.

use aci_contracts::RunId;
use bob_core::SessionId;

use crate::Error;

/// The run of a bob session: the session id itself, validated as a [`RunId`].
///
/// The mapping is the identity, so the run id that `aci inspect --run` and
/// `aci verify --run` take is the bob session id. It is never hashed,
/// prefixed or replaced: a session id that is not a valid run id (empty,
/// longer than 128 bytes, or with a byte outside ASCII letters, digits, `_`,
/// `.`, `:`, `-`) is refused with [`Error::InvalidSession`].
///
/// # Errors
/// [`Error::InvalidSession`].
pub fn run_id_for_session(session_id: &SessionId) -> Result<RunId, Error> {
    RunId::new(session_id.as_str()).map_err(|_| Error::InvalidSession)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_is_the_run_or_refused() {
        let run = run_id_for_session(&"incident-42.a:b_c".to_owned());
        assert_eq!(
            run.map(RunId::into_string).ok().as_deref(),
            Some("incident-42.a:b_c")
        );
        for bad in ["", "has space", "a/b", "{tag}", "é", &"x".repeat(129)] {
            assert!(matches!(
                run_id_for_session(&bad.to_owned()),
                Err(Error::InvalidSession)
            ));
        }
    }
}
