//! Handles SQS messages: appends `<body> <name>=<value>...` (attributes sorted by name) to
//! the Redis list named by variable `record_key` on the server at variable
//! `record_address`, then asks for the message's deletion. Body `fail` returns an error and
//! `leave` returns `message-action.leave`: both are recorded, and the message stays. A body
//! starting with `slow` is handled for 1.5 s before it is recorded (a handler in flight).
//!
//! The export is the one the spin-trigger-sqs plugin calls: package
//! `fermyon:spin-sqs@2.0.0`, world `spin-sqs` (the plugin's sqs.wit, restated below).

wit_bindgen::generate!({
    inline: r#"
        package fermyon:spin-sqs@2.0.0;

        interface sqs-types {
            variant message-attribute-value {
                str(string),
                binary(list<u8>),
            }
            record message-attribute {
                name: string,
                data-type: option<string>,
                value: message-attribute-value,
            }
            record message {
                id: option<string>,
                message-attributes: list<message-attribute>,
                body: option<string>,
            }
            variant error {
                other(string),
            }
            enum message-action {
                delete,
                leave,
            }
        }

        world spin-sqs {
            use sqs-types.{message, message-action, error};
            export handle-queue-message: func(message: message) -> result<message-action, error>;
        }
    "#,
    world: "spin-sqs",
});

use fermyon::spin_sqs::sqs_types::MessageAttributeValue;
use spin_sdk::redis::{Connection, RedisParameter};
use spin_sdk::variables;

struct Sqs;

fn record(line: String) -> anyhow::Result<()> {
    let conn = Connection::open(&variables::get("record_address")?)?;
    conn.execute(
        "RPUSH",
        &[
            RedisParameter::Binary(variables::get("record_key")?.into_bytes()),
            RedisParameter::Binary(line.into_bytes()),
        ],
    )?;
    Ok(())
}

impl Guest for Sqs {
    fn handle_queue_message(message: Message) -> Result<MessageAction, Error> {
        let body = message.body.unwrap_or_default();
        if body.starts_with("slow") {
            std::thread::sleep(std::time::Duration::from_millis(1500));
        }
        let mut attrs: Vec<String> = message
            .message_attributes
            .into_iter()
            .map(|a| match a.value {
                MessageAttributeValue::Str(s) => format!("{}={s}", a.name),
                MessageAttributeValue::Binary(b) => format!("{}=bytes:{}", a.name, b.len()),
            })
            .collect();
        attrs.sort();
        let mut line = body.clone();
        for a in attrs {
            line.push(' ');
            line.push_str(&a);
        }
        record(line).map_err(|e| Error::Other(e.to_string()))?;
        match body.as_str() {
            "fail" => Err(Error::Other("asked to fail".into())),
            "leave" => Ok(MessageAction::Leave),
            _ => Ok(MessageAction::Delete),
        }
    }
}

export!(Sqs);
