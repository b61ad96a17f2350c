//! Watermark alignment groups (issue 32, item 2; Flink's `scan.watermark.alignment.*`,
//! decision 0042).
//!
//! Every source subtask of a group reports its watermark to its process's [`Alignment`];
//! each process sends the minimum of its members to the leader (`Report::Alignment`) at
//! most once per update interval and only when it changed; the leader broadcasts every
//! process's minimum ([`GroupMinima`], `Control::Alignment`), and a member's group
//! watermark is the lowest of the other processes' broadcast minima and its own process's
//! members as they are now ([`AlignmentMember::group_watermark`]): so within a process
//! nothing is an update interval old, and a source is never paused behind its own stale
//! watermark. Sources watch it and pause the splits that ran more than their drift ahead.
//!
//! A member that has no watermark yet holds its group at the start of time (Flink's
//! initial watermark), so that a source with a backlog does not run ahead of one that has
//! not read yet; it stops holding it once it has a watermark or turns idle (an idle
//! member never holds it: a split that never delivers would pause every other for good).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Group name -> process -> the lowest watermark of the process's members (ns since the
/// Unix epoch; [`HELD`] while one of them has none yet). Members that are idle do not
/// count; a process all of whose members are idle is absent.
pub type GroupWatermarks = Arc<BTreeMap<String, BTreeMap<usize, i64>>>;

/// The watermark of a member that has none yet: it holds its group at the start of time.
pub const HELD: i64 = i64::MIN;

/// What a member last reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberWatermark {
    /// No watermark yet: holds the group ([`HELD`]).
    Unknown,
    /// Idle: does not hold the group.
    Idle,
    /// At this watermark (ns since the Unix epoch).
    At(i64),
}

impl MemberWatermark {
    /// What the member holds its group at; `None`: nothing (idle).
    fn holds(self) -> Option<i64> {
        match self {
            MemberWatermark::Unknown => Some(HELD),
            MemberWatermark::Idle => None,
            MemberWatermark::At(w) => Some(w),
        }
    }
}

/// One reporting member: a source subtask in a group.
#[derive(Debug, Clone, Copy)]
struct Member {
    watermark: MemberWatermark,
    update_interval: Duration,
}

/// This process's side: what its members reported, and the leader's latest minima.
#[derive(Debug)]
pub struct Alignment {
    /// This process's index in the cluster.
    process: usize,
    /// (group, operator id, subtask) -> what it reported last.
    members: Mutex<BTreeMap<(String, String, usize), Member>>,
    minima: watch::Sender<GroupWatermarks>,
}

impl Alignment {
    pub fn new(process: usize) -> Self {
        Alignment {
            process,
            members: Mutex::new(BTreeMap::new()),
            minima: watch::Sender::new(Arc::new(BTreeMap::new())),
        }
    }

    /// Member `(operator_id, subtask)` of `group` is at `watermark`; the process forwards
    /// its groups' minima at most every `update_interval` (the smallest of its members').
    pub fn report(
        &self,
        group: &str,
        operator_id: &str,
        subtask: usize,
        watermark: MemberWatermark,
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

    /// Every group with a member here -> the lowest watermark its members here hold it at
    /// ([`HELD`] while one has none yet; `None` while all are idle).
    pub fn local(&self) -> BTreeMap<String, Option<i64>> {
        let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: BTreeMap<String, Option<i64>> = BTreeMap::new();
        for ((group, _, _), member) in m.iter() {
            let e = out.entry(group.clone()).or_insert(None);
            if let Some(w) = member.watermark.holds() {
                *e = Some(e.map_or(w, |x| x.min(w)));
            }
        }
        out
    }

    /// `group`'s watermark for a member here: the lowest of the other processes' last
    /// broadcast minima and this process's members now; `None` while nothing holds it.
    fn group_watermark(&self, broadcast: &GroupWatermarks, group: &str) -> Option<i64> {
        let here = self.local().get(group).copied().flatten();
        let elsewhere = broadcast.get(group).and_then(|per| {
            per.iter()
                .filter(|(p, _)| **p != self.process)
                .map(|(_, w)| *w)
                .min()
        });
        match (here, elsewhere) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The smallest update interval of the members here; `None` without members.
    pub fn update_interval(&self) -> Option<Duration> {
        let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.values().map(|v| v.update_interval).min()
    }

    /// The leader's broadcast.
    pub fn set_minima(&self, minima: BTreeMap<String, BTreeMap<usize, i64>>) {
        self.minima.send_replace(Arc::new(minima));
    }
}

/// A source subtask's membership in an alignment group
/// ([`SourceContext::join_alignment_group`](crate::SourceContext::join_alignment_group)).
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
        m.report(MemberWatermark::Unknown);
        m
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// This subtask's watermark is `watermark`. A map insert: members of this process see
    /// it at once, the process forwards it to the others at its next update interval.
    pub fn report(&self, watermark: MemberWatermark) {
        self.alignment.report(
            &self.group,
            &self.operator_id,
            self.subtask,
            watermark,
            self.update_interval,
        );
    }

    /// The group's watermark (ns since the Unix epoch): the lowest that its members that
    /// are not idle hold it at, this process's as they are now and the others' as last
    /// broadcast; [`HELD`] while one has no watermark yet; `None` while nothing holds it.
    pub fn group_watermark(&mut self) -> Option<i64> {
        let broadcast = self.watch.borrow_and_update().clone();
        self.alignment.group_watermark(&broadcast, &self.group)
    }

    /// Resolves when a broadcast arrived since the last [`Self::group_watermark`]; never
    /// once the process's coordinator is gone.
    pub async fn changed(&mut self) {
        if self.watch.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How often a process forwards a changed shared bound to the leader: a bound moves at
/// most once per probe, and every process waits for it before its watermark may move.
const SHARED_BOUND_UPDATE: Duration = Duration::from_millis(100);

/// The group name of shared bound `name`: a NUL first, so that no alignment group named
/// in SQL (1–256 printable characters) meets it.
fn shared_bound_group(name: &str) -> String {
    format!("\u{0}bound:{name}")
}

/// A job-wide bound that one subtask publishes and every subtask of every process reads
/// ([`SourceContext::join_shared_bound`](crate::SourceContext::join_shared_bound)):
/// the lowest of what its reporters report. It travels as an alignment group does (a map
/// insert here, the leader's broadcast to the other processes), so it costs no channel of
/// its own. Readers never hold it.
#[derive(Debug)]
pub struct SharedBound {
    member: AlignmentMember,
}

/// What a shared bound is, as one subtask reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundValue {
    /// No reporter has reported yet, or one has said it does not know.
    Unknown,
    /// Every reporter said there is no bound.
    Unbounded,
    /// At most this (ns since the Unix epoch).
    At(i64),
}

impl SharedBound {
    pub(crate) fn new(
        alignment: Arc<Alignment>,
        name: &str,
        operator_id: &str,
        subtask: usize,
        reporter: bool,
    ) -> Self {
        // A reporter joins under a key of its own, so a subtask that both reads and
        // reports holds two entries.
        let id = if reporter {
            format!("{operator_id}\u{0}reporter")
        } else {
            operator_id.to_string()
        };
        let member = AlignmentMember::new(
            alignment,
            &shared_bound_group(name),
            &id,
            subtask,
            SHARED_BOUND_UPDATE,
        );
        if !reporter {
            member.report(MemberWatermark::Idle);
        }
        SharedBound { member }
    }

    /// A reporter and a reader of bound `name` in a process of their own: for a test of
    /// a reporter without a job.
    pub fn standalone(name: &str) -> (SharedBound, SharedBound) {
        let a = Arc::new(Alignment::new(0));
        (
            SharedBound::new(a.clone(), name, "standalone", 0, true),
            SharedBound::new(a, name, "standalone", 0, false),
        )
    }

    /// A reporter's news: the bound is at most `ns`.
    pub fn report_at(&self, ns: i64) {
        self.member.report(MemberWatermark::At(ns));
    }

    /// A reporter's news: there is no bound (what it measures cannot be measured here).
    pub fn report_unbounded(&self) {
        self.member.report(MemberWatermark::At(i64::MAX));
    }

    /// The bound now: this process's reporters as they are, the others' as last
    /// broadcast. Before any report reached this process: [`BoundValue::Unknown`].
    pub fn get(&mut self) -> BoundValue {
        match self.member.group_watermark() {
            None | Some(HELD) => BoundValue::Unknown,
            Some(i64::MAX) => BoundValue::Unbounded,
            Some(ns) => BoundValue::At(ns),
        }
    }
}

/// The leader's side: each process's latest local minima, and what it broadcast last.
#[derive(Debug, Default)]
pub struct GroupMinima {
    per_process: BTreeMap<usize, BTreeMap<String, Option<i64>>>,
    sent: BTreeMap<String, BTreeMap<usize, i64>>,
}

impl GroupMinima {
    /// Process `process` reported `groups`; returns group -> process -> minimum (idle
    /// processes left out) when it changed.
    pub fn on_report(
        &mut self,
        process: usize,
        groups: BTreeMap<String, Option<i64>>,
    ) -> Option<BTreeMap<String, BTreeMap<usize, i64>>> {
        self.per_process.insert(process, groups);
        let mut minima: BTreeMap<String, BTreeMap<usize, i64>> = BTreeMap::new();
        for (p, groups) in &self.per_process {
            for (group, w) in groups {
                if let Some(w) = *w {
                    minima.entry(group.clone()).or_default().insert(*p, w);
                }
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
    use MemberWatermark::{At, Idle, Unknown};

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_process_sends_the_lowest_watermark_its_members_hold_each_group_at() {
        let a = Alignment::new(0);
        assert_eq!(a.update_interval(), None);
        a.report("g", "source-a", 0, At(50), S);
        a.report("g", "source-b", 0, Idle, Duration::from_millis(200));
        a.report("g", "source-b", 1, At(20), S);
        a.report("h", "source-c", 0, Idle, S);
        a.report("k", "source-d", 0, Unknown, S);
        let local = a.local();
        assert_eq!(local.get("g"), Some(&Some(20)), "idle members do not count");
        assert_eq!(local.get("h"), Some(&None), "all idle: nothing held");
        assert_eq!(local.get("k"), Some(&Some(HELD)), "no watermark yet: held");
        assert_eq!(a.update_interval(), Some(Duration::from_millis(200)));
        // A member's later report replaces its earlier one.
        a.report("g", "source-b", 1, At(70), S);
        assert_eq!(a.local().get("g"), Some(&Some(50)));
    }

    #[test]
    fn the_leader_broadcasts_each_processs_minimum_only_when_it_changes() {
        let mut g = GroupMinima::default();
        let m = |v: &[(&str, Option<i64>)]| {
            v.iter()
                .map(|(k, w)| (k.to_string(), *w))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(g.on_report(0, m(&[("g", None)])), None, "nothing held");
        let first = g.on_report(0, m(&[("g", Some(100))])).expect("a minimum");
        assert_eq!(first["g"], BTreeMap::from([(0, 100)]));
        assert_eq!(g.on_report(0, m(&[("g", Some(100))])), None, "unchanged");
        let both = g.on_report(1, m(&[("g", Some(40))])).expect("changed");
        assert_eq!(both["g"], BTreeMap::from([(0, 100), (1, 40)]));
        // Process 1 turns idle: it is left out.
        let up = g.on_report(1, m(&[("g", None)])).expect("changed");
        assert_eq!(up["g"], BTreeMap::from([(0, 100)]));
    }

    /// A member reads its own process's members as they are now and the others' as last
    /// broadcast: a source is never held back by its own stale watermark.
    #[tokio::test]
    async fn a_member_sees_its_process_now_and_the_others_as_broadcast() {
        let a = Arc::new(Alignment::new(1));
        let mut m = AlignmentMember::new(a.clone(), "g", "source-a", 1, S);
        assert_eq!(
            a.local().get("g"),
            Some(&Some(HELD)),
            "joined, no watermark yet"
        );
        assert_eq!(m.group_watermark(), Some(HELD), "it holds its own group");
        m.report(At(9));
        assert_eq!(m.group_watermark(), Some(9), "its own report, at once");
        a.set_minima(BTreeMap::from([
            ("h".to_string(), BTreeMap::from([(0, 1)])),
            // Process 1's own entry is stale (5): its members now are read instead.
            ("g".to_string(), BTreeMap::from([(0, 30), (1, 5)])),
        ]));
        tokio::time::timeout(Duration::from_secs(5), m.changed())
            .await
            .expect("woken by the broadcast");
        assert_eq!(m.group_watermark(), Some(9));
        m.report(At(50));
        assert_eq!(m.group_watermark(), Some(30), "process 0 is behind");
        m.report(Idle);
        assert_eq!(m.group_watermark(), Some(30), "only process 0 holds it");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), m.changed())
                .await
                .is_err(),
            "nothing new since it was read"
        );
    }

    /// A shared bound reads `Unknown` until its reporter reported, whether the reporter is
    /// in this process or another; a reporter's "no bound" reads `Unbounded`; readers
    /// never hold it, and a user's group of the same name is another group.
    #[test]
    fn a_shared_bound_is_unknown_until_reported_and_readers_never_hold_it() {
        let here = Arc::new(Alignment::new(0));
        let mut reader = SharedBound::new(here.clone(), "sub", "source-a", 1, false);
        assert_eq!(reader.get(), BoundValue::Unknown, "nothing reported");
        let reporter = SharedBound::new(here.clone(), "sub", "source-a", 0, true);
        assert_eq!(
            reader.get(),
            BoundValue::Unknown,
            "the reporter has not measured"
        );
        reporter.report_at(42);
        assert_eq!(reader.get(), BoundValue::At(42));
        reporter.report_unbounded();
        assert_eq!(reader.get(), BoundValue::Unbounded);
        here.report("sub", "source-z", 0, At(1), S);
        assert_eq!(
            reader.get(),
            BoundValue::Unbounded,
            "an alignment group 'sub' is apart"
        );
        // Another process: only readers here, the reporter's value comes by broadcast.
        let there = Arc::new(Alignment::new(1));
        let mut far = SharedBound::new(there.clone(), "sub", "source-a", 2, false);
        assert_eq!(far.get(), BoundValue::Unknown, "before the broadcast");
        let group = shared_bound_group("sub");
        assert_eq!(
            there.local().get(&group),
            Some(&None),
            "readers hold nothing"
        );
        there.set_minima(BTreeMap::from([(group, BTreeMap::from([(0, 77)]))]));
        assert_eq!(far.get(), BoundValue::At(77));
    }
}
