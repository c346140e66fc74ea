//! The app's triggers other than HTTP: Redis, MQTT, cron, command, SQS and NATS, typed by the app
//! format crate and checked here so that a bad setting fails the load (naming the trigger
//! and the key), before any server is contacted.

use anyhow::{anyhow, bail};
use spin_app_format::trigger::{NatsTriggerConfig, NatsTriggerMetadata, SqsTriggerConfig};
use spin_app_format::{
    CommandTriggerConfig, CronTriggerConfig, LockedApp, MqttTriggerConfig, MqttTriggerMetadata,
    RedisTriggerConfig, RedisTriggerMetadata,
};

/// One trigger of a type: its id and its typed configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger<T> {
    /// Trigger id (`<component>-<type>-trigger` unless the manifest names one).
    pub id: String,
    /// `[[trigger.<type>]]` as written (templates not yet expanded).
    pub config: T,
}

/// Every non-HTTP trigger of an app, with the app-wide settings of its type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventTriggers {
    /// `[[trigger.redis]]`.
    pub redis: Vec<Trigger<RedisTriggerConfig>>,
    /// `[application.trigger.redis]`.
    pub redis_settings: RedisTriggerMetadata,
    /// `[[trigger.mqtt]]`.
    pub mqtt: Vec<Trigger<MqttTriggerConfig>>,
    /// `[application.trigger.mqtt]`.
    pub mqtt_settings: MqttTriggerMetadata,
    /// `[[trigger.cron]]`.
    pub cron: Vec<Trigger<CronTriggerConfig>>,
    /// `[[trigger.command]]`.
    pub command: Vec<Trigger<CommandTriggerConfig>>,
    /// `[[trigger.sqs]]`.
    pub sqs: Vec<Trigger<SqsTriggerConfig>>,
    /// `[[trigger.nats]]`.
    pub nats: Vec<Trigger<NatsTriggerConfig>>,
    /// `[application.trigger.nats]`.
    pub nats_settings: NatsTriggerMetadata,
}

impl EventTriggers {
    /// Whether the app has no non-HTTP trigger.
    pub fn is_empty(&self) -> bool {
        self.redis.is_empty()
            && self.mqtt.is_empty()
            && self.cron.is_empty()
            && self.command.is_empty()
            && self.sqs.is_empty()
            && self.nats.is_empty()
    }

    /// `(trigger id, trigger type, component)` of every trigger.
    pub fn components(&self) -> impl Iterator<Item = (&str, &'static str, &str)> {
        let r = self
            .redis
            .iter()
            .map(|t| (t.id.as_str(), "redis", t.config.component.as_str()));
        let m = self
            .mqtt
            .iter()
            .map(|t| (t.id.as_str(), "mqtt", t.config.component.as_str()));
        let c = self
            .cron
            .iter()
            .map(|t| (t.id.as_str(), "cron", t.config.component.as_str()));
        let x = self
            .command
            .iter()
            .map(|t| (t.id.as_str(), "command", t.config.component.as_str()));
        let q = self
            .sqs
            .iter()
            .map(|t| (t.id.as_str(), "sqs", t.config.component.as_str()));
        let n = self
            .nats
            .iter()
            .map(|t| (t.id.as_str(), "nats", t.config.component.as_str()));
        r.chain(m).chain(c).chain(x).chain(q).chain(n)
    }

    /// Keeps only the triggers whose component `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.redis.retain(|t| keep(&t.config.component));
        self.mqtt.retain(|t| keep(&t.config.component));
        self.cron.retain(|t| keep(&t.config.component));
        self.command.retain(|t| keep(&t.config.component));
        self.sqs.retain(|t| keep(&t.config.component));
        self.nats.retain(|t| keep(&t.config.component));
    }

    /// Reads the app-wide settings of the types the app uses from the lock.
    pub(super) fn read_settings(&mut self, lock: &LockedApp, origin: &str) -> anyhow::Result<()> {
        if !self.redis.is_empty() {
            self.redis_settings = lock
                .trigger_metadata("redis")
                .map_err(|e| anyhow!("{origin}: {e:#}"))?
                .unwrap_or_default();
        }
        if !self.mqtt.is_empty() {
            self.mqtt_settings = lock
                .trigger_metadata("mqtt")
                .map_err(|e| anyhow!("{origin}: {e:#}"))?
                .unwrap_or_default();
        }
        if !self.nats.is_empty() {
            self.nats_settings = lock
                .trigger_metadata("nats")
                .map_err(|e| anyhow!("{origin}: {e:#}"))?
                .unwrap_or_default();
        }
        Ok(())
    }

    /// Checks what can be checked before running: a server address for every Redis and
    /// MQTT trigger, QoS and keep-alive values, cron expressions.
    pub(super) fn validate(&self, origin: &str) -> anyhow::Result<()> {
        for t in &self.redis {
            if t.config.address.is_none() && self.redis_settings.address.trim().is_empty() {
                bail!(
                    "{origin}: redis trigger `{}` has no server address: set `address` in \
                     [application.trigger.redis] (e.g. \"redis://redis:6379\") or in the \
                     [[trigger.redis]] entry",
                    t.id
                );
            }
        }
        if !self.mqtt.is_empty() {
            if self.mqtt_settings.address.trim().is_empty() {
                bail!(
                    "{origin}: key `application.trigger.mqtt.address` is missing: the MQTT \
                     trigger needs the broker, e.g. address = \"mqtt://mosquitto:1883\""
                );
            }
            super::trigger_config::mqtt::keep_alive(&self.mqtt_settings.keep_alive_interval)
                .map_err(|e| anyhow!("{origin}: {e}"))?;
        }
        for t in &self.mqtt {
            super::trigger_config::mqtt::qos(&t.config.qos)
                .map_err(|e| anyhow!("{origin}: mqtt trigger `{}`: {e}", t.id))?;
        }
        for t in &self.cron {
            super::trigger_config::cron::parse(&t.config.cron_expression)
                .map_err(|e| anyhow!("{origin}: cron trigger `{}`: {e}", t.id))?;
        }
        for t in &self.sqs {
            super::trigger_config::sqs::check(&t.config)
                .map_err(|e| anyhow!("{origin}: sqs trigger `{}` ([[trigger.sqs]]): {e}", t.id))?;
        }
        for t in &self.nats {
            if t.config.address.is_none() && self.nats_settings.address.trim().is_empty() {
                bail!(
                    "{origin}: nats trigger `{}` has no server address: set `address` in \
                     [application.trigger.nats] (e.g. \"nats://nats:4222\") or in the \
                     [[trigger.nats]] entry",
                    t.id
                );
            }
            super::trigger_config::nats::check(&t.config).map_err(|e| {
                anyhow!("{origin}: nats trigger `{}` ([[trigger.nats]]): {e}", t.id)
            })?;
        }
        Ok(())
    }
}
