//! Watermark alignment groups (issue 32, item 2; Flink's `scan.watermark.alignment.*`,
//! decision 0042).
//!
//! Every source subtask of a group reports its watermark to its process's [`Alignment`];
//! each process sends the minimum of its members to the leader (`Report::Alignment`) at
//! most once per update interval and only when it changed; the leader takes the minimum
//! over processes ([`GroupMinima`]) and broadcasts it (`Control::Alignment`) to every
//! process, whose sources watch it and pause the splits that ran more than their drift
//! ahead. A member with no watermark yet, or an idle one, does not hold its group back (a
//! split that never delivers would otherwise pause every other one for good).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Group name -> the group's watermark (ns since the Unix epoch): the lowest of its
/// members that have one and are not idle. A group none of whose members has one is absent.
pub type GroupWatermarks = Arc<BTreeMap<String, i64>>;

/// One reporting member: a source subtask in a group.
#[derive(Debug, Clone, Copy)]
struct Member {
    /// `None`: unknown yet, or idle.
    watermark: Option<i64>,
    update_interval: Duration,
}

/// This process's side: what its members reported, and the leader's latest minima.
#[derive(Debug)]
pub(crate) struct Alignment {
    /// (group, operator id, subtask) -> what it reported last.
    members: Mutex<BTreeMap<(String, String, usize), Member>>,
    minima: watch::Sender<GroupWatermarks>,
}

impl Default for Alignment {
    fn default() -> Self {
        Alignment {
            members: Mutex::new(BTreeMap::new()),
            minima: watch::Sender::new(Arc::new(BTreeMap::new())),
        }
    }
}

impl Alignment {
    /// Member `(operator_id, subtask)` of `group` is at `watermark` (`None`: unknown or
    /// idle); the process forwards its groups' minima at most every `update_interval`
    /// (the smallest of its members').
    pub fn report(
        &self,
        group: &str,
        operator_id: &str,
        subtask: usize,
        watermark: Option<i64>,
        update_interval: Duration,
    ) {
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(
            (group.to_string(), operator_id.to_string(), subtask),
            Member {
                watermark,
                update_interval,
            },
        );
    }

    /// The leader's minima, as they change.
    pub fn watch(&self) -> watch::Receiver<GroupWatermarks> {
        self.minima.subscribe()
    }

    /// Every group with a member here -> the lowest watermark of its members here (`None`
    /// while none has one).
    pub fn local(&self) -> BTreeMap<String, Option<i64>> {
        let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: BTreeMap<String, Option<i64>> = BTreeMap::new();
        for ((group, _, _), member) in m.iter() {
            let e = out.entry(group.clone()).or_insert(None);
            if let Some(w) = member.watermark {
                *e = Some(e.map_or(w, |x| x.min(w)));
            }
        }
        out
    }

    /// The smallest update interval of the members here; `None` without members.
    pub fn update_interval(&self) -> Option<Duration> {
        let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.values().map(|v| v.update_interval).min()
    }

    /// The leader's broadcast.
    pub fn set_minima(&self, minima: BTreeMap<String, i64>) {
        self.minima.send_replace(Arc::new(minima));
    }
}

/// A source subtask's membership in an alignment group
/// ([`SourceContext::join_alignment_group`](crate::spi::SourceContext::join_alignment_group)).
#[derive(Debug)]
pub struct AlignmentMember {
    alignment: Arc<Alignment>,
    group: String,
    operator_id: String,
    subtask: usize,
    update_interval: Duration,
    watch: watch::Receiver<GroupWatermarks>,
}

impl AlignmentMember {
    pub(crate) fn new(
        alignment: Arc<Alignment>,
        group: &str,
        operator_id: &str,
        subtask: usize,
        update_interval: Duration,
    ) -> Self {
        let watch = alignment.watch();
        let m = AlignmentMember {
            alignment,
            group: group.to_string(),
            operator_id: operator_id.to_string(),
            subtask,
            update_interval,
            watch,
        };
        m.report(None);
        m
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// This subtask's watermark is `watermark` (ns since the Unix epoch; `None` while it
    /// has none or is idle: it then does not hold the group back). A map insert; the
    /// process forwards the change at its next update interval.
    pub fn report(&self, watermark: Option<i64>) {
        self.alignment.report(
            &self.group,
            &self.operator_id,
            self.subtask,
            watermark,
            self.update_interval,
        );
    }

    /// The group's watermark as the leader last broadcast it (the lowest of its members
    /// that have one and are not idle, over every process); `None` while none has one.
    pub fn group_watermark(&mut self) -> Option<i64> {
        self.watch.borrow_and_update().get(&self.group).copied()
    }

    /// Resolves when a broadcast arrived since the last [`Self::group_watermark`]; never
    /// once the process's coordinator is gone.
    pub async fn changed(&mut self) {
        if self.watch.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The leader's side: each process's latest local minima, and the group minima last
/// broadcast.
#[derive(Debug, Default)]
pub(crate) struct GroupMinima {
    per_process: BTreeMap<usize, BTreeMap<String, Option<i64>>>,
    sent: BTreeMap<String, i64>,
}

impl GroupMinima {
    /// Process `process` reported `groups`; returns the new minima when they changed.
    pub fn on_report(
        &mut self,
        process: usize,
        groups: BTreeMap<String, Option<i64>>,
    ) -> Option<BTreeMap<String, i64>> {
        self.per_process.insert(process, groups);
        let mut minima: BTreeMap<String, i64> = BTreeMap::new();
        for (group, w) in self.per_process.values().flatten() {
            if let Some(w) = *w {
                let e = minima.entry(group.clone()).or_insert(w);
                *e = (*e).min(w);
            }
        }
        (minima != self.sent).then(|| {
            self.sent = minima.clone();
            minima
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_process_sends_the_lowest_known_watermark_of_each_group() {
        let a = Alignment::default();
        assert_eq!(a.update_interval(), None);
        a.report("g", "source-a", 0, Some(50), S);
        a.report("g", "source-b", 0, None, Duration::from_millis(200));
        a.report("g", "source-b", 1, Some(20), S);
        a.report("h", "source-c", 0, None, S);
        let local = a.local();
        assert_eq!(local.get("g"), Some(&Some(20)));
        assert_eq!(local.get("h"), Some(&None), "unknown or idle: no minimum");
        assert_eq!(a.update_interval(), Some(Duration::from_millis(200)));
        // A member's later report replaces its earlier one.
        a.report("g", "source-b", 1, Some(70), S);
        assert_eq!(a.local().get("g"), Some(&Some(50)));
    }

    #[test]
    fn the_leader_broadcasts_the_minimum_over_processes_only_when_it_changes() {
        let mut g = GroupMinima::default();
        let m = |v: &[(&str, Option<i64>)]| {
            v.iter()
                .map(|(k, w)| (k.to_string(), *w))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(g.on_report(0, m(&[("g", None)])), None, "nothing known");
        let first = g.on_report(0, m(&[("g", Some(100))])).expect("a minimum");
        assert_eq!(first.get("g"), Some(&100));
        assert_eq!(g.on_report(0, m(&[("g", Some(100))])), None, "unchanged");
        // Another process behind: the minimum goes down to it.
        let lower = g.on_report(1, m(&[("g", Some(40))])).expect("changed");
        assert_eq!(lower.get("g"), Some(&40));
        // It turns idle: it no longer holds the group back.
        let up = g.on_report(1, m(&[("g", None)])).expect("changed");
        assert_eq!(up.get("g"), Some(&100));
    }

    #[tokio::test]
    async fn a_member_reports_unknown_at_first_and_sees_its_groups_broadcast() {
        let a = Arc::new(Alignment::default());
        let mut m = AlignmentMember::new(a.clone(), "g", "source-a", 1, S);
        assert_eq!(a.local().get("g"), Some(&None), "joined, not known yet");
        m.report(Some(9));
        assert_eq!(a.local().get("g"), Some(&Some(9)));
        assert_eq!(m.group_watermark(), None);
        a.set_minima(BTreeMap::from([("h".to_string(), 1), ("g".to_string(), 7)]));
        tokio::time::timeout(Duration::from_secs(5), m.changed())
            .await
            .expect("woken by the broadcast");
        assert_eq!(m.group_watermark(), Some(7));
        assert!(
            tokio::time::timeout(Duration::from_millis(20), m.changed())
                .await
                .is_err(),
            "nothing new since it was read"
        );
    }
}
