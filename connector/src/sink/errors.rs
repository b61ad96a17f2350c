//! The error classes of a failed publish and what the sink does about each (SPEC 6).

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::error::PublishError;

/// What to do with a message whose publish failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The topic is gone: park, create it (under `create-if-needed`), republish.
    TopicMissing,
    /// The request was refused as a whole: republish the message alone, and route it
    /// only if it is refused on its own.
    InvalidArgument,
    /// A transient failure the client's retries did not outlast (unavailable, deadline,
    /// quota, an interrupted connection): republish after the recovery backoff.
    Transient,
    /// The message's ordering key was paused by an earlier failure of the same key:
    /// republish it, in order, once the key is resumed.
    KeyPaused,
    /// Nothing the sink can repair (permission, authentication, a shut-down publisher,
    /// ...): the checkpoint fails.
    Fatal,
}

/// The gRPC status code of a publish error, if it has one.
pub fn code(e: &PublishError) -> Option<Code> {
    match e {
        PublishError::Rpc(e) => e.status().map(|s| s.code),
        _ => None,
    }
}

/// The metric label of a publish error: the gRPC code in upper snake case
/// (`NOT_FOUND`), `TRANSPORT` for a failure without a status, `ORDERING_KEY_PAUSED` or
/// `SHUTDOWN`.
pub fn label(e: &PublishError) -> String {
    match e {
        PublishError::Rpc(inner) => match inner.status() {
            Some(s) => code_name(s.code),
            None => "TRANSPORT".into(),
        },
        PublishError::OrderingKeyPaused => "ORDERING_KEY_PAUSED".into(),
        _ => "SHUTDOWN".into(),
    }
}

/// `Code::NotFound` -> `NOT_FOUND`.
pub fn code_name(c: Code) -> String {
    let debug = format!("{c:?}");
    let mut out = String::new();
    for (i, ch) in debug.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// The class of a publish error (SPEC 6).
pub fn classify(e: &PublishError) -> Repair {
    match e {
        PublishError::OrderingKeyPaused => Repair::KeyPaused,
        PublishError::Rpc(inner) => match inner.status().map(|s| s.code) {
            Some(Code::NotFound) => Repair::TopicMissing,
            Some(Code::InvalidArgument) => Repair::InvalidArgument,
            Some(
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::ResourceExhausted
                | Code::Aborted
                | Code::Internal
                | Code::Unknown
                | Code::Cancelled,
            ) => Repair::Transient,
            Some(_) => Repair::Fatal,
            // No status: the connection failed (refused, reset, timed out) after the
            // client's own retries.
            None => Repair::Transient,
        },
        _ => Repair::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_are_upper_snake_case() {
        assert_eq!(code_name(Code::NotFound), "NOT_FOUND");
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::Unavailable), "UNAVAILABLE");
        assert_eq!(
            classify(&PublishError::OrderingKeyPaused),
            Repair::KeyPaused
        );
        assert_eq!(classify(&PublishError::Shutdown), Repair::Fatal);
    }
}
