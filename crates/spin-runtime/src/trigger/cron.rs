//! The cron trigger, as the spin-trigger-cron plugin defines it: `[[trigger.cron]]
//! component, cron_expression`, six fields with seconds first and both day fields matching
//! (the plugin's parser, croner, with the plugin's options), each tick calling the
//! component's root export `handle-cron-event(metadata { timestamp }) -> result<_, error>`
//! of `fermyon:spin-cron@2.0.0` (`timestamp`: the tick, in Unix seconds).
//!
//! Beyond the plugin (which schedules in UTC): ticks are computed in the container's time
//! zone, `TZ` from its environment (a zone name such as `Europe/Berlin`), else the
//! system's local time (`/etc/localtime`; UTC when there is none). Zone names come from the
//! IANA database bundled into the binary (jiff's copy), so they resolve in a `FROM scratch`
//! image too; `TZ` may also be a POSIX rule such as `CET-1CEST,M3.5.0,M10.5.0/3`. A tick
//! fires at most once; after a pause (a stopped process, a suspended node) the ticks missed
//! are skipped and the schedule goes on from the present, with no catch-up burst.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use chrono::{
    DateTime, Datelike, FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime, TimeZone, Timelike,
    Utc,
};
use croner::Cron;
use wasmtime::component::{ComponentType, Lift, Lower};

use super::{call, find_handler, Handler, Stop};
use crate::app::trigger_config::cron::parse;
use crate::runtime::LoadedApp;

/// The root function cron components export.
pub const HANDLE_CRON_EVENT: &str = "handle-cron-event";

/// `cron-types.metadata`.
#[derive(ComponentType, Lower, Debug, Clone, Copy)]
#[component(record)]
pub(crate) struct CronMetadata {
    timestamp: u64,
}

/// `cron-types.error`.
#[derive(ComponentType, Lift, Debug, Clone)]
#[component(variant)]
pub(crate) enum CronError {
    #[component(name = "other")]
    Other(String),
}

/// The time zone ticks are computed in.
#[derive(Debug, Clone, PartialEq)]
pub enum Zone {
    /// A zone named by `TZ`.
    Named(NamedZone),
    /// The system's local time.
    Local,
}

impl Zone {
    /// `TZ` from `env` (a leading `:` is ignored), else local time. A `TZ` that names no
    /// zone is logged and local time is used.
    pub fn from_env(env: &HashMap<String, String>) -> Zone {
        match env.get("TZ").map(|v| v.trim_start_matches(':').trim()) {
            None | Some("") => Zone::Local,
            Some(name) => match NamedZone::new(name) {
                Some(zone) => Zone::Named(zone),
                None => {
                    tracing::warn!(
                        "TZ=`{name}` is neither a time-zone name such as Europe/Berlin nor a \
                         POSIX rule such as CET-1CEST,M3.5.0,M10.5.0/3: cron schedules use the \
                         system's local time"
                    );
                    Zone::Local
                }
            },
        }
    }

    /// The first tick of `cron` strictly after `after`.
    pub fn next_after(&self, cron: &Cron, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        fn next<Z: TimeZone>(cron: &Cron, after: DateTime<Utc>, z: &Z) -> Option<DateTime<Utc>> {
            cron.find_next_occurrence(&after.with_timezone(z), false)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        }
        match self {
            Zone::Named(tz) => next(cron, after, tz),
            Zone::Local => next(cron, after, &chrono::Local),
        }
    }
}

/// A zone of the bundled IANA database (or a POSIX `TZ` rule), as chrono's [`TimeZone`], which
/// croner computes ticks with.
#[derive(Clone, PartialEq)]
pub struct NamedZone {
    name: Arc<str>,
    tz: jiff::tz::TimeZone,
}

/// A [`NamedZone`]'s offset at one instant; it carries the zone, as chrono asks of an offset.
#[derive(Clone, Debug)]
pub struct NamedOffset {
    zone: NamedZone,
    fixed: FixedOffset,
}

impl NamedZone {
    /// The zone `name` names in the bundled database (any case), else the POSIX rule `name`
    /// spells; `None` for neither.
    pub fn new(name: &str) -> Option<NamedZone> {
        let tz = jiff::tz::TimeZone::get(name)
            .or_else(|_| jiff::tz::TimeZone::posix(name))
            .ok()?;
        Some(NamedZone {
            name: name.into(),
            tz,
        })
    }

    fn offset(&self, offset: jiff::tz::Offset) -> NamedOffset {
        // chrono's offsets stay within a day; POSIX rules may reach 24:59:59.
        let secs = offset.seconds().clamp(-86_399, 86_399);
        NamedOffset {
            zone: self.clone(),
            fixed: FixedOffset::east_opt(secs).expect("clamped to chrono's range"),
        }
    }

    fn offset_at(&self, utc: &NaiveDateTime) -> NamedOffset {
        let t = utc.and_utc();
        let nanos = t.timestamp_subsec_nanos().min(999_999_999) as i32;
        let ts = jiff::Timestamp::new(t.timestamp(), nanos).unwrap_or(if t.timestamp() < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        self.offset(self.tz.to_offset(ts))
    }
}

impl std::fmt::Debug for NamedZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl chrono::Offset for NamedOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl TimeZone for NamedZone {
    type Offset = NamedOffset;

    fn from_offset(offset: &NamedOffset) -> NamedZone {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> MappedLocalTime<NamedOffset> {
        self.offset_from_local_datetime(&local.and_time(chrono::NaiveTime::MIN))
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<NamedOffset> {
        let civil = i16::try_from(local.year()).ok().and_then(|year| {
            jiff::civil::DateTime::new(
                year,
                local.month() as i8,
                local.day() as i8,
                local.hour() as i8,
                local.minute() as i8,
                local.second() as i8,
                local.nanosecond().min(999_999_999) as i32,
            )
            .ok()
        });
        // Beyond jiff's years (+-9999) no zone has rules: the offset at that instant as UTC.
        let Some(civil) = civil else {
            return MappedLocalTime::Single(self.offset_at(local));
        };
        match self.tz.to_ambiguous_timestamp(civil).offset() {
            jiff::tz::AmbiguousOffset::Unambiguous { offset } => {
                MappedLocalTime::Single(self.offset(offset))
            }
            jiff::tz::AmbiguousOffset::Gap { .. } => MappedLocalTime::None,
            // `before` is the earlier instant, which chrono lists first.
            jiff::tz::AmbiguousOffset::Fold { before, after } => {
                MappedLocalTime::Ambiguous(self.offset(before), self.offset(after))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> NamedOffset {
        self.offset_at(&utc.and_time(chrono::NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> NamedOffset {
        self.offset_at(utc)
    }
}

/// One `[[trigger.cron]]` entry, ready to run.
pub(crate) struct Schedule {
    trigger: String,
    expression: String,
    cron: Cron,
    zone: Zone,
    handler: Arc<Handler>,
}

/// Resolves the app's cron triggers; fails naming the trigger.
pub(crate) fn prepare(
    app: &LoadedApp,
    env: &HashMap<String, String>,
) -> anyhow::Result<Vec<Schedule>> {
    let zone = Zone::from_env(env);
    app.app
        .event_triggers
        .cron
        .iter()
        .map(|t| {
            let what = format!("cron trigger `{}`", t.id);
            let cron = parse(&t.config.cron_expression).map_err(|e| anyhow!("{what}: {e}"))?;
            let handler = find_handler(
                app,
                &what,
                &t.config.component,
                None,
                HANDLE_CRON_EVENT,
                "a cron component is built with spin-cron-sdk's #[cron_component]",
            )?;
            Ok(Schedule {
                trigger: t.id.clone(),
                expression: t.config.cron_expression.clone(),
                cron,
                zone: zone.clone(),
                handler: Arc::new(handler),
            })
        })
        .collect()
}

impl Schedule {
    /// Fires on every tick until the app stops; then waits up to `drain` for running
    /// handlers.
    pub(crate) async fn run(self, app: Arc<LoadedApp>, mut stop: Stop, drain: Duration) {
        tracing::info!(
            trigger = %self.trigger,
            schedule = %self.expression,
            zone = ?self.zone,
            "cron trigger scheduled"
        );
        let mut running = tokio::task::JoinSet::new();
        let mut last: Option<DateTime<Utc>> = None;
        loop {
            let now = Utc::now();
            // Strictly after the last tick fired too, so a clock that reads earlier after
            // waking can never fire the same tick again.
            let from = match last {
                Some(l) if l > now => l,
                _ => now,
            };
            let Some(tick) = self.zone.next_after(&self.cron, from) else {
                tracing::warn!(trigger = %self.trigger, "cron schedule has no further ticks");
                break;
            };
            let wait = (tick - now).to_std().unwrap_or_default();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait() => break,
            }
            // Reap finished handlers.
            while running.try_join_next().is_some() {}
            last = Some(tick);
            let (app, handler, trigger) = (app.clone(), self.handler.clone(), self.trigger.clone());
            let metadata = CronMetadata {
                timestamp: tick.timestamp().max(0) as u64,
            };
            running.spawn(async move {
                let component = &handler.component.id;
                match call::<_, (Result<(), CronError>,)>(&app, &handler, "cron", (metadata,)).await {
                    Ok((Ok(()),)) => {
                        tracing::debug!(trigger = %trigger, component = %component, tick = metadata.timestamp, "cron event handled")
                    }
                    Ok((Err(CronError::Other(e)),)) => tracing::error!(
                        trigger = %trigger,
                        component = %component,
                        "cron handler returned an error: {e}"
                    ),
                    Err(e) => tracing::error!(
                        trigger = %trigger,
                        component = %component,
                        "cron handler failed: {e:#}"
                    ),
                }
            });
        }
        if tokio::time::timeout(drain, async {
            while running.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            running.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn ticks_in_the_named_zone_and_strictly_after() {
        let every_second = parse("* * * * * *").unwrap();
        let t = at("2026-01-01T00:00:00Z");
        let utc = Zone::Named(NamedZone::new("UTC").unwrap());
        let z = utc.clone();
        assert_eq!(
            z.next_after(&every_second, t),
            Some(at("2026-01-01T00:00:01Z"))
        );
        // 12:30 in Kolkata (UTC+05:30) is 07:00 UTC.
        let daily = parse("0 30 12 * * *").unwrap();
        let env = HashMap::from([("TZ".to_string(), "Asia/Kolkata".to_string())]);
        let kolkata = Zone::from_env(&env);
        assert_eq!(
            kolkata,
            Zone::Named(NamedZone::new("Asia/Kolkata").unwrap())
        );
        assert_eq!(
            kolkata.next_after(&daily, t),
            Some(at("2026-01-01T07:00:00Z"))
        );
        assert_eq!(utc.next_after(&daily, t), Some(at("2026-01-01T12:30:00Z")));
        // The plugin's example and five fields (no seconds) as the plugin's parser sees them.
        assert!(parse("1/2 * * * * *").is_ok());
        let e = parse("*/5 * * * *").unwrap_err().to_string();
        assert!(e.contains("six"), "{e}");
        let bad = HashMap::from([("TZ".to_string(), "Mars/Olympus".to_string())]);
        assert_eq!(Zone::from_env(&bad), Zone::Local);
    }

    #[test]
    fn named_zones_follow_daylight_saving_time() {
        let berlin = NamedZone::new("Europe/Berlin").unwrap();
        let local = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        let east = |h: i32| FixedOffset::east_opt(h * 3600).unwrap();
        let fix = |o: NamedOffset| chrono::Offset::fix(&o);
        assert_eq!(
            fix(berlin.offset_at(&local("2026-01-01 12:00:00"))),
            east(1)
        );
        assert_eq!(
            fix(berlin.offset_at(&local("2026-07-01 12:00:00"))),
            east(2)
        );
        // 2026-03-29 02:30 does not exist in Berlin; 2026-10-25 02:30 happens twice, the
        // summer-time one first.
        assert!(matches!(
            berlin.offset_from_local_datetime(&local("2026-03-29 02:30:00")),
            MappedLocalTime::None
        ));
        match berlin.offset_from_local_datetime(&local("2026-10-25 02:30:00")) {
            MappedLocalTime::Ambiguous(a, b) => assert_eq!((fix(a), fix(b)), (east(2), east(1))),
            other => panic!("{other:?}"),
        }
        // Noon in Berlin moves from 11:00 to 10:00 UTC across the spring change.
        let noon = parse("0 0 12 * * *").unwrap();
        let z = Zone::Named(berlin.clone());
        assert_eq!(
            z.next_after(&noon, at("2026-03-28T12:00:00Z")),
            Some(at("2026-03-29T10:00:00Z"))
        );
        assert_eq!(
            z.next_after(&noon, at("2026-03-27T12:00:00Z")),
            Some(at("2026-03-28T11:00:00Z"))
        );
        // The repeated 02:30 fires once, at the first.
        let half_past_two = parse("0 30 2 * * *").unwrap();
        assert_eq!(
            z.next_after(&half_past_two, at("2026-10-24T12:00:00Z")),
            Some(at("2026-10-25T00:30:00Z"))
        );
        // A POSIX rule, and any case of a name.
        let env = HashMap::from([("TZ".to_string(), "CET-1CEST,M3.5.0,M10.5.0/3".to_string())]);
        let posix = Zone::from_env(&env);
        assert!(matches!(posix, Zone::Named(_)), "{posix:?}");
        assert_eq!(
            posix.next_after(&noon, at("2026-07-01T00:00:00Z")),
            Some(at("2026-07-01T10:00:00Z"))
        );
        let lower = Zone::Named(NamedZone::new("europe/berlin").unwrap());
        assert_eq!(
            lower.next_after(&noon, at("2026-07-01T00:00:00Z")),
            Some(at("2026-07-01T10:00:00Z"))
        );
    }
}
