//! What can go wrong between a template's source and its rendered prompt. The variants are
//! split by who is to blame, because callers answer them differently: a broken template or an
//! unreadable model directory is the operator's (a 5xx, or a refusal to start), while a
//! template that rejects the conversation, input of the wrong shape and conversations past
//! the bounds are the client's (a 4xx).

use std::fmt;
use std::path::PathBuf;

/// One error from compiling, finding or rendering a chat template. `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// The template does not parse (reported by [`ChatTemplate::new`](super::ChatTemplate::new)).
    Syntax(String),
    /// The template called `raise_exception(message)`: it rejects this conversation (for
    /// instance roles that do not alternate). Holds the template's own message.
    Raised(String),
    /// Rendering failed for another reason: an undefined attribute, an operation on the wrong
    /// type, a recursion limit.
    Render(String),
    /// The rendered prompt would pass the output bound.
    OutputTooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// The template ran past its instruction budget (a loop that does not end, or a
    /// conversation far larger than any sane one).
    OutOfFuel {
        /// The budget, in template instructions.
        fuel: u64,
    },
    /// The request's data is not of the shape a chat template takes (messages not an array,
    /// a content part that is not text, a kwarg that would shadow `messages`).
    BadInput(String),
    /// The model directory's template could not be read.
    Load {
        /// The file that could not be read or understood.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::Syntax(message) => {
                write!(f, "chat template syntax error: {}", OneLine(message))
            }
            TemplateError::Raised(message) => {
                write!(
                    f,
                    "chat template rejected the conversation: {}",
                    OneLine(message)
                )
            }
            TemplateError::Render(message) => {
                write!(f, "chat template render error: {}", OneLine(message))
            }
            TemplateError::OutputTooLarge { limit } => {
                write!(f, "rendered chat prompt is larger than {limit} bytes")
            }
            TemplateError::OutOfFuel { fuel } => {
                write!(
                    f,
                    "chat template ran past its budget of {fuel} instructions"
                )
            }
            TemplateError::BadInput(message) => {
                write!(f, "bad chat template input: {}", OneLine(message))
            }
            TemplateError::Load { path, reason } => {
                write!(
                    f,
                    "cannot load chat template from {}: {reason}",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for TemplateError {}

/// A message shown on one line: a template's own text (`raise_exception`'s argument) may hold
/// line breaks, which would split a log line or a status text.
struct OneLine<'a>(&'a str);

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, piece) in self.0.split(char::is_control).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(piece)?;
        }
        Ok(())
    }
}
