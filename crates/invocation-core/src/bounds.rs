//! The bounds policy of every projector: bounds are validated when a tool is
//! built, and invalid bounds are refused, never clamped silently.
//!
//! Each tool crate's bounds type (`RagBounds`, `LogBounds`, `MysqlBounds`)
//! implements [`ProjectionBounds`]; its `x_tool_with(source, bounds)`
//! constructor calls [`ProjectionBounds::validate`] and returns the error, so
//! a misconfigured deployment fails at start-up instead of returning less
//! (or more) than it was told to.

/// The smallest text bound (escaped JSON bytes, without quotes) that fits any
/// one character: the longest escape, `\u00XX`, is 6 bytes. A text bound at
/// least this large never shortens a non-empty field to nothing.
pub const MIN_TEXT_BYTES: usize = crate::json_size::MAX_ESCAPED_CHAR_BYTES;

/// Why bounds were refused. The message names the bound; it carries no
/// runtime data beyond the configured numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidBounds {
    /// One bound is below its minimum.
    #[error("{bound} must be at least {minimum}")]
    TooSmall {
        /// The field, for example `max_excerpt_bytes`.
        bound: &'static str,
        /// Its smallest accepted value.
        minimum: usize,
    },
    /// Bounds that are each valid contradict each other.
    #[error("{0}")]
    Inconsistent(&'static str),
}

impl InvalidBounds {
    /// The stable code of every bounds refusal.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        "INVALID_BOUNDS"
    }
}

/// Checks `value >= minimum` for the bound named `bound`.
///
/// # Errors
/// [`InvalidBounds::TooSmall`] when `value < minimum`.
pub const fn at_least(
    bound: &'static str,
    value: usize,
    minimum: usize,
) -> Result<(), InvalidBounds> {
    if value < minimum {
        Err(InvalidBounds::TooSmall { bound, minimum })
    } else {
        Ok(())
    }
}

/// A projector's bounds: what it lets through, checked before it runs.
pub trait ProjectionBounds: Copy + std::fmt::Debug + Send + Sync + 'static {
    /// Checks that every bound can hold something and that the bounds agree.
    ///
    /// # Errors
    /// [`InvalidBounds`] naming the first bound that is refused.
    fn validate(&self) -> Result<(), InvalidBounds>;

    /// These bounds, if valid.
    ///
    /// # Errors
    /// As [`validate`](Self::validate).
    fn validated(self) -> Result<Self, InvalidBounds> {
        self.validate().map(|()| self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy)]
    struct Example {
        max_items: usize,
        max_text_bytes: usize,
        max_total_bytes: usize,
    }

    impl ProjectionBounds for Example {
        fn validate(&self) -> Result<(), InvalidBounds> {
            at_least("max_items", self.max_items, 1)?;
            at_least("max_text_bytes", self.max_text_bytes, MIN_TEXT_BYTES)?;
            if self.max_total_bytes < self.max_text_bytes {
                return Err(InvalidBounds::Inconsistent(
                    "max_total_bytes is below max_text_bytes",
                ));
            }
            Ok(())
        }
    }

    #[test]
    fn invalid_bounds_are_refused_not_clamped() {
        let good = Example {
            max_items: 1,
            max_text_bytes: MIN_TEXT_BYTES,
            max_total_bytes: 100,
        };
        assert_eq!(
            good.validated().map(|b| b.max_text_bytes),
            Ok(MIN_TEXT_BYTES)
        );
        let small = Example {
            max_text_bytes: MIN_TEXT_BYTES - 1,
            ..good
        };
        let error = small.validated().unwrap_err();
        assert_eq!(
            error,
            InvalidBounds::TooSmall {
                bound: "max_text_bytes",
                minimum: 6
            }
        );
        assert_eq!(error.to_string(), "max_text_bytes must be at least 6");
        assert_eq!(error.code(), "INVALID_BOUNDS");
        let zero = Example {
            max_items: 0,
            ..good
        };
        assert_eq!(
            zero.validate().unwrap_err().to_string(),
            "max_items must be at least 1"
        );
        let inconsistent = Example {
            max_total_bytes: 1,
            ..good
        };
        assert!(matches!(
            inconsistent.validate(),
            Err(InvalidBounds::Inconsistent(_))
        ));
    }

    #[test]
    fn min_text_bytes_fits_any_character() {
        for c in ['a', '\u{0}', '"', '中', '😀'] {
            assert!(crate::json_size::escaped_char_len(c) <= MIN_TEXT_BYTES);
        }
    }
}
