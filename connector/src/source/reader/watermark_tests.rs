use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::*;

const S: i64 = 1_000_000_000;

fn marks(bound_s: u64, idle_s: Option<u64>, splits: usize, now: Instant) -> Watermarks {
    let mut w = Watermarks::new(
        Duration::from_secs(bound_s),
        idle_s.map(Duration::from_secs),
        None,
    )
    .unwrap();
    for _ in 0..splits {
        w.add_split(now);
    }
    w
}

#[test]
fn the_watermark_is_the_lowest_splits_highest_event_time_less_the_bound() {
    let t0 = Instant::now();
    let mut w = marks(2, None, 2, t0);
    w.observe(0, 100 * S, t0);
    // Split 1 has not delivered: it holds the watermark back.
    assert_eq!(
        w.advance(t0),
        WatermarkStatus {
            watermark_ns: None,
            idle: false,
            held_by: HeldBy::Newest
        }
    );
    w.observe(1, 50 * S, t0);
    w.observe(1, 40 * S, t0);
    assert_eq!(w.advance(t0).watermark_ns, Some(48 * S));
    w.observe(1, 200 * S, t0);
    assert_eq!(w.advance(t0).watermark_ns, Some(98 * S));
}

#[test]
fn a_split_paused_by_alignment_is_never_idle_and_its_idle_clock_restarts_on_resume() {
    let t0 = Instant::now();
    let mut w = marks(1, Some(10), 2, t0);
    assert_eq!(w.split_watermark(0), None, "nothing delivered");
    w.observe(0, 100 * S, t0);
    w.observe(1, 50 * S, t0);
    assert_eq!(w.split_watermark(0), Some(99 * S));
    assert_eq!(w.advance(t0).watermark_ns, Some(49 * S));
    // Split 0 is paused: it delivers nothing into rows for a long time, but its waiting
    // messages must not let the subtask's watermark pass them.
    w.set_paused(0, true, t0);
    let later = t0 + Duration::from_secs(60);
    w.observe(1, 80 * S, later);
    let s = w.advance(later);
    assert_eq!((s.watermark_ns, s.idle), (Some(79 * S), false));
    // Resumed: idle only a full timeout after the resume.
    w.set_paused(0, false, later);
    w.observe(1, 200 * S, later + Duration::from_secs(9));
    assert_eq!(
        w.advance(later + Duration::from_secs(9)).watermark_ns,
        Some(99 * S)
    );
    w.observe(1, 200 * S, later + Duration::from_secs(10));
    assert_eq!(
        w.advance(later + Duration::from_secs(10)).watermark_ns,
        Some(199 * S),
        "split 0 idled out 10 s after its resume"
    );
}

#[test]
fn the_watermark_never_goes_backwards() {
    let t0 = Instant::now();
    let mut w = marks(0, Some(10), 2, t0);
    w.observe(0, 100 * S, t0);
    w.observe(1, 100 * S, t0);
    assert_eq!(w.advance(t0).watermark_ns, Some(100 * S));
    // Split 0 idles out; split 1 alone carries it; then split 0 comes back far behind.
    w.observe(1, 120 * S, t0 + Duration::from_secs(5));
    assert_eq!(
        w.advance(t0 + Duration::from_secs(11)).watermark_ns,
        Some(120 * S)
    );
    assert!(w.observe(0, 90 * S, t0 + Duration::from_secs(12)));
    assert_eq!(
        w.advance(t0 + Duration::from_secs(12)).watermark_ns,
        Some(120 * S)
    );
    // Restored from a checkpoint: the start is the floor.
    let mut r = Watermarks::new(Duration::ZERO, None, Some(500 * S)).unwrap();
    r.add_split(t0);
    r.observe(0, 10 * S, t0);
    assert_eq!(r.advance(t0).watermark_ns, Some(500 * S));
}

#[test]
fn an_idle_split_stops_holding_the_watermark_back_and_all_idle_is_idle() {
    let t0 = Instant::now();
    let mut w = marks(1, Some(30), 2, t0);
    w.observe(0, 100 * S, t0 + Duration::from_secs(5));
    assert_eq!(w.advance(t0 + Duration::from_secs(29)).watermark_ns, None);
    let at = t0 + Duration::from_secs(30);
    // Split 1 never delivered: idle after 30 s, split 0 alone sets the watermark.
    assert_eq!(
        w.advance(at),
        WatermarkStatus {
            watermark_ns: Some(99 * S),
            idle: false,
            held_by: HeldBy::Newest
        }
    );
    let later = t0 + Duration::from_secs(35);
    assert_eq!(
        w.advance(later),
        WatermarkStatus {
            watermark_ns: Some(99 * S),
            idle: true,
            held_by: HeldBy::Idle
        }
    );
    // A delivery makes its split active again.
    w.observe(1, 200 * S, later);
    assert_eq!(
        w.advance(later),
        WatermarkStatus {
            watermark_ns: Some(199 * S),
            idle: false,
            held_by: HeldBy::Newest
        }
    );
    // Without an idle timeout a silent split holds it back for good.
    let mut never = marks(1, None, 2, t0);
    never.observe(0, 100 * S, t0);
    let day = t0 + Duration::from_secs(86_400);
    assert_eq!(
        never.advance(day),
        WatermarkStatus {
            watermark_ns: None,
            idle: false,
            held_by: HeldBy::Newest
        }
    );
}

/// Found by a newcomer's run with `scan.watermark.idle-timeout` = 1 s: the run loop stamps
/// a delivery with the clock of its last advance, which after a quiet spell is older than
/// the timeout, so the split counted as idle at the very advance after it delivered and
/// its event times were never taken (no watermark at all). A split that delivered since
/// the last advance is never idle at the next one.
#[test]
fn a_split_that_just_delivered_is_not_idle_however_old_the_clock_it_was_stamped_with() {
    let t0 = Instant::now();
    let mut w = marks(1, Some(1), 1, t0);
    assert!(w.advance(t0 + Duration::from_secs(5)).idle);
    // Delivered at t0 + 5 s, stamped with the clock of the advance before (t0).
    w.observe(0, 100 * S, t0);
    assert_eq!(
        w.advance(t0 + Duration::from_secs(5)),
        WatermarkStatus {
            watermark_ns: Some(99 * S),
            idle: false,
            held_by: HeldBy::Newest
        }
    );
    // Nothing more: idle again at the next advance, keeping its watermark.
    assert_eq!(
        w.advance(t0 + Duration::from_secs(6)),
        WatermarkStatus {
            watermark_ns: Some(99 * S),
            idle: true,
            held_by: HeldBy::Idle
        }
    );
}

#[test]
fn a_message_at_or_below_the_watermark_is_behind_it() {
    let t0 = Instant::now();
    let mut w = marks(5, None, 1, t0);
    assert!(!w.observe(0, 100 * S, t0));
    assert_eq!(w.advance(t0).watermark_ns, Some(95 * S));
    assert!(w.observe(0, 95 * S, t0));
    assert!(!w.observe(0, 95 * S + 1, t0));
    // Event times near the ends of the range saturate instead of wrapping.
    let mut edge = marks(5, None, 1, t0);
    edge.observe(0, i64::MIN + 1, t0);
    assert_eq!(edge.advance(t0).watermark_ns, Some(i64::MIN));
}

#[test]
fn a_restore_starts_from_the_lowest_checkpointed_watermark_or_none() {
    let (a, b, null) = (json!(7), json!(3), json!(null));
    assert_eq!(restore([Some(&a), Some(&b)]).unwrap(), Some(3));
    assert_eq!(restore([]).unwrap(), None);
    // A subtask whose split had not delivered: none. One without the key (no split, or
    // an older state) is left out.
    assert_eq!(restore([Some(&a), Some(&null)]).unwrap(), None);
    assert_eq!(restore([Some(&a), None]).unwrap(), Some(7));
    assert_eq!(restore([None, None]).unwrap(), None);
    let bad = json!("soon");
    let e = restore([Some(&bad)]).unwrap_err().to_string();
    assert!(e.contains("\"soon\""), "{e}");
    assert_eq!(snapshot(Some(3)), json!(3));
    assert_eq!(snapshot(None), json!(null));
}

#[test]
fn a_bound_that_does_not_fit_nanoseconds_is_refused() {
    let e = Watermarks::new(Duration::from_secs(u64::MAX), None, None).unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
}

/// Found by a newcomer's run: a table switched from publish time to an attribute kept the
/// publish-time watermark (today) for times of any age, so every message counted behind.
#[test]
fn a_watermark_of_another_event_time_source_is_not_restored() {
    let publish = event_time_source(None, None);
    let attribute = event_time_source(Some("eventTime"), None);
    assert_eq!(publish, "publish-time");
    assert_eq!(attribute, "attribute:eventTime");
    assert_eq!(event_time_source(Some("a"), Some("ts")), "column:ts");
    let p = serde_json::Value::from(publish.as_str());
    let a = serde_json::Value::from(attribute.as_str());
    // Checkpoints from before the key were of publish time.
    assert_eq!(changed_event_time([None, Some(&p)], &publish), None);
    assert_eq!(
        changed_event_time([None], &attribute).as_deref(),
        Some("publish-time")
    );
    assert_eq!(changed_event_time([Some(&a)], &attribute), None);
    assert_eq!(
        changed_event_time([Some(&a), Some(&p)], &attribute).as_deref(),
        Some("publish-time")
    );
    assert_eq!(changed_event_time([], &attribute), None);
}

/// The backlog bound (decision 0047): the watermark never passes the oldest unacked
/// publish time less the bound, stays where it is while the bound is unknown, and the
/// gauge names the rule that holds it.
#[test]
fn the_backlog_holds_the_watermark_behind_the_oldest_unacked_message() {
    let t0 = Instant::now();
    let mut w = marks(2, Some(30), 2, t0);
    w.set_backlog(Backlog::Unknown);
    w.observe(0, 100 * S, t0);
    w.observe(1, 100 * S, t0);
    let s = w.advance(t0);
    assert_eq!(
        (s.watermark_ns, s.held_by),
        (None, HeldBy::Backlog),
        "no probe yet"
    );
    // Another consumer holds a message published at 60 s: the watermark stays behind it.
    w.set_backlog(Backlog::OldestUnacked(60 * S));
    let s = w.advance(t0);
    assert_eq!((s.watermark_ns, s.held_by), (Some(58 * S), HeldBy::Backlog));
    assert!(
        !w.observe(0, 60 * S, t0),
        "that message is not behind when it comes back"
    );
    // A failed probe: unknown again, the watermark stays at its last safe value.
    w.set_backlog(Backlog::Unknown);
    w.observe(0, 150 * S, t0);
    w.observe(1, 150 * S, t0);
    assert_eq!(w.advance(t0).watermark_ns, Some(58 * S));
    // The backlog caught up past the newest: the newest rule holds it.
    w.set_backlog(Backlog::OldestUnacked(500 * S));
    let s = w.advance(t0);
    assert_eq!((s.watermark_ns, s.held_by), (Some(148 * S), HeldBy::Newest));
    // Off (or not permitted): the newest rule alone.
    w.set_backlog(Backlog::Unbounded);
    w.observe(0, 200 * S, t0);
    w.observe(1, 200 * S, t0);
    assert_eq!(w.advance(t0).held_by, HeldBy::Newest);
    // An older bound later never lowers the watermark.
    w.set_backlog(Backlog::OldestUnacked(10 * S));
    let s = w.advance(t0);
    assert_eq!(
        (s.watermark_ns, s.held_by),
        (Some(198 * S), HeldBy::Backlog)
    );
}

#[test]
fn the_rule_holding_the_watermark_is_alignment_when_its_slowest_split_is_paused() {
    let t0 = Instant::now();
    let mut w = marks(0, None, 2, t0);
    w.observe(0, 10 * S, t0);
    w.observe(1, 50 * S, t0);
    w.set_paused(0, true, t0);
    assert_eq!(w.advance(t0).held_by, HeldBy::Alignment);
    w.set_paused(0, false, t0);
    assert_eq!(w.advance(t0).held_by, HeldBy::Newest);
}

/// Found by the issue 44 review: a split idle for the timeout stopped holding the
/// watermark while another consumer held its subscription's older messages, so a query
/// over a second, busier table advanced past them. Now a split is not idle while the
/// backlog holds a message published before its newest event time, nor while the bound is
/// unknown; a split that never delivered idles out as before.
#[test]
fn a_split_owed_an_older_unacked_message_is_not_idle() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(60);
    let mut w = marks(1, Some(30), 2, t0);
    w.observe(0, 100 * S, t0);
    // Split 1 never delivers; split 0 delivered at 100 s and then nothing for 60 s.
    w.set_backlog(Backlog::OldestUnacked(80 * S));
    let s = w.advance(later);
    assert_eq!(
        (s.watermark_ns, s.idle, s.held_by),
        (Some(79 * S), false, HeldBy::Backlog),
        "a message published at 80 s is still unacked: split 0 holds"
    );
    w.set_backlog(Backlog::Unknown);
    assert!(!w.advance(later).idle, "an unknown backlog may owe it one");
    // The backlog passed its newest event time: nothing older is owed, it idles out.
    w.set_backlog(Backlog::OldestUnacked(100 * S));
    let s = w.advance(later);
    assert_eq!((s.watermark_ns, s.idle), (Some(79 * S), true));
    // Without the probe, idle as before.
    w.set_backlog(Backlog::Unbounded);
    assert!(w.advance(later).idle);
}

/// Found by the e2e test `backlog::alignment_pauses_and_parks_...`: alignment compared a
/// split's newest event time with a group watermark that the backlog bound held behind
/// the split's own paused (unacked) messages, so the split never resumed. Alignment now
/// reports the progress, the newest rule without the backlog bound.
#[test]
fn the_progress_alignment_reports_ignores_the_backlog_bound() {
    let t0 = Instant::now();
    let mut w = marks(1, None, 2, t0);
    w.set_backlog(Backlog::OldestUnacked(20 * S));
    w.observe(0, 100 * S, t0);
    assert_eq!(w.advance(t0).watermark_ns, None);
    assert_eq!(w.progress(), None, "split 1 has not delivered");
    w.observe(1, 90 * S, t0);
    let s = w.advance(t0);
    assert_eq!(s.watermark_ns, Some(19 * S), "held by the backlog");
    assert_eq!(
        w.progress(),
        Some(89 * S),
        "the slowest split's newest less 1 s"
    );
    // Never lowered.
    w.observe(1, 50 * S, t0);
    w.advance(t0);
    assert_eq!(w.progress(), Some(89 * S));
}

/// Found by review: a split owed a message is not idle, but alignment (which only paces
/// reading) must still see it quiet, or a probe that never answers (`Unknown` for good)
/// would hold its group, and park the others, for good.
#[test]
fn an_owed_split_is_not_idle_but_is_quiet_for_alignment() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(60);
    let mut w = marks(1, Some(30), 1, t0);
    w.set_backlog(Backlog::Unknown);
    w.observe(0, 100 * S, t0);
    assert!(!w.advance(t0).idle);
    assert!(!w.quiet(), "it just delivered");
    let s = w.advance(later);
    assert!(!s.idle, "owed: the bound is unknown");
    assert!(w.quiet(), "silent for the idle timeout");
    w.set_paused(0, true, later);
    w.advance(later + Duration::from_secs(60));
    assert!(!w.quiet(), "a paused split is never quiet");
}
