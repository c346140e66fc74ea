//! Handles MQTT messages as a spin-trigger-mqtt 0.8 (Spin 4) component: appends
//! `async:<topic> <payload>` to the Redis list named by variable `record_key` on the server
//! at variable `record_address`, through Spin 4's async Redis API
//! (../../sdk-common/record_async.rs). A payload `fail` returns an error (nothing recorded).
//!
//! spin-mqtt-sdk 0.8 is not on crates.io, so the export is generated here from the plugin's
//! WIT (`spin-mqtt.wit` of spinframework/spin-trigger-mqtt v0.8.0, package
//! `spin:mqtt-trigger@3.0.0`, world `spin-mqtt`), as its `#[mqtt_component]` macro does.

wit_bindgen::generate!({
    inline: r#"
        package spin:mqtt-trigger@3.0.0;

        interface spin-mqtt-types {
            variant error {
                other(string),
            }
            enum qos {
                at-most-once,
                at-least-once,
                exactly-once,
            }
            record metadata {
                topic: string,
            }
            type payload = list<u8>;
        }

        world spin-mqtt {
            use spin-mqtt-types.{error, metadata, payload};
            export handle-message: async func(message: payload, metadata: metadata) -> result<_, error>;
        }
    "#,
    world: "spin-mqtt",
});

include!("../../sdk-common/record_async.rs");

struct Mqtt;

impl Guest for Mqtt {
    async fn handle_message(message: Vec<u8>, metadata: Metadata) -> Result<(), Error> {
        if message == b"fail" {
            return Err(Error::Other("asked to fail".into()));
        }
        let mut line = format!("async:{} ", metadata.topic).into_bytes();
        line.extend(message);
        record(line).await.map_err(|e| Error::Other(e.to_string()))
    }
}

export!(Mqtt);
