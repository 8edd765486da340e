//! Failures as Python exceptions: the Python side (`dpgate.errors`) owns
//! the exception classes, one per problem type, so this only sorts a
//! failure into the kinds `_native_error` takes.

use dpgate_client::ClientError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Why a native call failed.
#[derive(Debug)]
pub enum Failure {
    /// The server answered with a problem document (its JSON).
    Problem(String),
    /// The request did not complete.
    Transport(String),
    /// An answer the client does not understand, with its HTTP status.
    Unexpected(String, u16),
    /// Bad arguments (a malformed id or JSON).
    Invalid(String),
    /// Anything else: a trainer that diverged, a model file that does not
    /// fit the rows, I/O.
    Failed(String),
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Problem(problem) => match serde_json::to_string(&problem) {
                Ok(json) => Failure::Problem(json),
                Err(error) => Failure::Failed(error.to_string()),
            },
            ClientError::Http(error) => Failure::Transport(error.to_string()),
            ClientError::Unexpected { status, body } => Failure::Unexpected(
                format!("unexpected response {status}: {body}"),
                status.as_u16(),
            ),
        }
    }
}

impl From<anyhow::Error> for Failure {
    /// The client's error when there is one in the chain (a failed call
    /// inside a flow), else the whole chain as a message.
    fn from(error: anyhow::Error) -> Self {
        match error.downcast::<ClientError>() {
            Ok(client) => client.into(),
            Err(error) => Failure::Failed(format!("{error:#}")),
        }
    }
}

/// An argument that does not parse.
pub fn invalid(what: &str, error: impl std::fmt::Display) -> Failure {
    Failure::Invalid(format!("{what}: {error}"))
}

/// The exception `dpgate.errors._native_error` makes of `failure`.
pub fn to_py(py: Python<'_>, failure: Failure) -> PyErr {
    let (kind, message, problem, status) = match failure {
        Failure::Problem(json) => ("problem", String::new(), Some(json), None),
        Failure::Transport(message) => ("transport", message, None, None),
        Failure::Unexpected(message, status) => ("unexpected", message, None, Some(status)),
        Failure::Invalid(message) => ("invalid", message, None, None),
        Failure::Failed(message) => ("failed", message, None, None),
    };
    let made = py
        .import("dpgate.errors")
        .and_then(|errors| errors.getattr("_native_error"))
        .and_then(|make| make.call1((kind, message.clone(), problem, status)));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        // Without the Python half (a broken install), still say what failed.
        Err(_) => PyRuntimeError::new_err(format!("{kind}: {message}")),
    }
}
