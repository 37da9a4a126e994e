//! The one error type of validated input, configuration files and controller tables
//! alike: the path of the offending field and what is wrong with it, shown as
//! `path: problem` (`uplinks[1].interface: no such interface "eth7"`,
//! `apps[2].rate_up_kbps: must be at most 100000000`).

/// A field of some input that was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct FieldError {
    pub path: String,
    pub problem: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, problem: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            problem: problem.into(),
        }
    }
}
