//! The one error type of the library.

use thiserror::Error as ThisError;

/// Everything that can go wrong in qrepack, each with a message naming the problem.
///
/// ```
/// use qrepack::{Error, GgmlType, QMatrix};
/// let err = QMatrix::new(GgmlType::Q4_0, 8, 48, &[0u8; 8 * 27]).unwrap_err();
/// assert!(matches!(err, Error::Shape(_)));
/// assert!(err.to_string().contains("multiple of 32"));
/// ```
#[derive(Debug, ThisError, Clone, PartialEq, Eq)]
pub enum Error {
    /// A dimension or a slice length does not fit the operation.
    #[error("shape error: {0}")]
    Shape(String),
    /// A type, layout or combination qrepack does not handle.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An argument value is out of range (an expert id, a layout for this row count ...).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A file is malformed, truncated or hostile (the message names the key or tensor).
    #[error("bad file: {0}")]
    Format(String),
    /// Reading or writing a file failed.
    #[error("i/o error: {0}")]
    Io(String),
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

/// Shorthand for `Result<T, qrepack::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
