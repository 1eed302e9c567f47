/// An error a request can end in; each maps to one HTTP status (SPEC §15.1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Something the client sent is wrong (400).
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The engine cannot answer yet (503), e.g. while populating its index.
    #[error("{0}")]
    Unavailable(String),
    /// An engine fault (500): never caused by client input.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn status(&self) -> u16 {
        match self {
            Error::BadRequest(_) => 400,
            Error::Unauthorized(_) => 401,
            Error::NotFound(_) => 404,
            Error::PayloadTooLarge(_) => 413,
            Error::Internal(_) => 500,
            Error::Unavailable(_) => 503,
        }
    }
    pub fn bad(msg: impl Into<String>) -> Self {
        Error::BadRequest(msg.into())
    }
    pub fn internal(msg: impl std::fmt::Display) -> Self {
        Error::Internal(msg.to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Internal(format!("I/O error: {e}"))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
