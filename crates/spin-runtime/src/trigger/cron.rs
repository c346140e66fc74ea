//! The cron trigger, as the spin-trigger-cron plugin defines it: `[[trigger.cron]]
//! component, cron_expression`, six fields with seconds first and both day fields matching
//! (the plugin's parser, croner, with the plugin's options), each tick calling the
//! component's root export `handle-cron-event(metadata { timestamp }) -> result<_, error>`
//! of `fermyon:spin-cron@2.0.0` (`timestamp`: the tick, in Unix seconds).
//!
//! Beyond the plugin (which schedules in UTC): ticks are computed in the container's time
//! zone, `TZ` from its environment (a zone name such as `Europe/Berlin`), else the
//! system's local time (`/etc/localtime`; UTC when there is none). A tick fires at most
//! once; after a pause (a stopped process, a suspended node) the ticks missed are skipped
//! and the schedule goes on from the present, with no catch-up burst.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use chrono::{DateTime, TimeZone, Utc};
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Zone {
    /// A zone named by `TZ`.
    Named(chrono_tz::Tz),
    /// The system's local time.
    Local,
}

impl Zone {
    /// `TZ` from `env` (a leading `:` is ignored), else local time. A `TZ` that names no
    /// zone is logged and local time is used.
    pub fn from_env(env: &HashMap<String, String>) -> Zone {
        match env.get("TZ").map(|v| v.trim_start_matches(':').trim()) {
            None | Some("") => Zone::Local,
            Some(name) => match name.parse::<chrono_tz::Tz>() {
                Ok(tz) => Zone::Named(tz),
                Err(_) => {
                    tracing::warn!(
                        "TZ=`{name}` is not a time-zone name such as Europe/Berlin: cron \
                         schedules use the system's local time"
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
                zone,
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
        let z = Zone::Named(chrono_tz::UTC);
        assert_eq!(
            z.next_after(&every_second, t),
            Some(at("2026-01-01T00:00:01Z"))
        );
        // 12:30 in Kolkata (UTC+05:30) is 07:00 UTC.
        let daily = parse("0 30 12 * * *").unwrap();
        let env = HashMap::from([("TZ".to_string(), "Asia/Kolkata".to_string())]);
        let kolkata = Zone::from_env(&env);
        assert_eq!(kolkata, Zone::Named(chrono_tz::Asia::Kolkata));
        assert_eq!(
            kolkata.next_after(&daily, t),
            Some(at("2026-01-01T07:00:00Z"))
        );
        assert_eq!(
            Zone::Named(chrono_tz::UTC).next_after(&daily, t),
            Some(at("2026-01-01T12:30:00Z"))
        );
        // The plugin's example and five fields (no seconds) as the plugin's parser sees them.
        assert!(parse("1/2 * * * * *").is_ok());
        let e = parse("*/5 * * * *").unwrap_err().to_string();
        assert!(e.contains("six"), "{e}");
        let bad = HashMap::from([("TZ".to_string(), "Mars/Olympus".to_string())]);
        assert_eq!(Zone::from_env(&bad), Zone::Local);
    }
}
