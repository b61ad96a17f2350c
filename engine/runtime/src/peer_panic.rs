//! One ERROR line, not pages of backtraces, when a peer process of the cluster dies.
//!
//! Timely's network threads (`timely:send-P`, `timely:recv-P`, P the peer's index) panic
//! when the connection to peer P breaks, which poisons the queues every worker shares;
//! the workers, the network guard's drop and the other network threads then panic too.
//! With the default hook each survivor printed ~270 lines of messages and backtraces. The
//! hook installed here prints one ERROR line for the first network panic, naming the peer
//! and what happens next, and stays silent for the cascade that follows; every other
//! panic goes to the hook that was installed before. The job's failure itself is still
//! reported by the coordinator ("lost the connection to another process ...").

use std::panic::PanicHookInfo;
use std::sync::{Mutex, Once};

/// This process's place in the cluster while one is connected.
struct Peers {
    hosts: Vec<String>,
    /// A peer's loss was reported: the panics that follow are its cascade.
    lost: bool,
}

static PEERS: Mutex<Option<Peers>> = Mutex::new(None);

/// Panic messages of the cascade a broken connection sets off in Timely 0.32.
const CASCADE: [&str; 4] = [
    "timely communication error",
    "MergeQueue",
    "Send thread panic",
    "Recv thread panic",
];

/// Whether `error` (a task's failure) is that cascade: the loss of a peer, not its cause.
pub(crate) fn is_cascade(error: &str) -> bool {
    CASCADE.iter().any(|c| error.contains(c))
}

/// Installs the hook (once per process) for a cluster of `hosts` (`host:port` by process
/// index); a later call replaces the hosts and forgets an earlier loss.
pub(crate) fn install(hosts: Vec<String>) {
    *PEERS.lock().unwrap_or_else(|e| e.into_inner()) = Some(Peers { hosts, lost: false });
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !on_panic(info) {
                previous(info);
            }
        }));
    });
}

/// Whether the panic was a lost peer's (then handled here).
fn on_panic(info: &PanicHookInfo<'_>) -> bool {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("");
    let message = info
        .payload()
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| info.payload().downcast_ref::<&str>().copied())
        .unwrap_or("");
    let mut guard = PEERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(peers) = guard.as_mut() else {
        return false;
    };
    let cascade = is_cascade(message);
    if peers.lost {
        return cascade || name.starts_with("timely");
    }
    let network = name
        .strip_prefix("timely:send-")
        .or_else(|| name.strip_prefix("timely:recv-"));
    let Some(peer) = network.and_then(|p| p.parse::<usize>().ok()) else {
        return false;
    };
    if !message.contains("timely communication error") {
        return false;
    }
    peers.lost = true;
    let at = peers.hosts.get(peer).map_or("?", String::as_str);
    let cause = message.trim_start_matches("timely communication error: ");
    tracing::error!(
        peer,
        "lost the connection to process {peer} ({at}): {cause}; it failed or was killed. This process stops without acknowledging anything more and exits 1; under `cluster`, every process is restarted from the last completed checkpoint"
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_panic_is_one_line_and_its_cascade_is_silent() {
        install(vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()]);
        let net = std::thread::Builder::new()
            .name("timely:recv-1".into())
            .spawn(|| panic!("timely communication error: reading data: connection reset"))
            .unwrap();
        assert!(net.join().is_err());
        assert!(PEERS.lock().unwrap().as_ref().unwrap().lost);
        let worker = std::thread::spawn(|| panic!("MergeQueue poisoned."));
        assert!(worker.join().is_err());
        // A fresh cluster forgets the loss.
        install(vec!["127.0.0.1:1".into()]);
        assert!(!PEERS.lock().unwrap().as_ref().unwrap().lost);
    }
}
