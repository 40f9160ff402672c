//! OpenTelemetry's log data model as OTLP/JSON (`ExportLogsServiceRequest`), the form an
//! OpenTelemetry collector takes at `POST /v1/logs` and most log pipelines read.
//!
//! Written as serde structs that follow the OTLP/JSON encoding
//! (opentelemetry-proto `logs/v1/logs.proto`, `common/v1/common.proto`): lowerCamelCase
//! field names, 64-bit integers as decimal strings, enums as numbers. The maintained
//! `opentelemetry-proto` crate has these types only behind its `gen-tonic-messages` +
//! `with-serde` features, which bring prost, tonic and their dependency trees into the
//! build for five plain structs; none of that is in this workspace's lock file. These
//! structs serialize to the same JSON.

use serde::{Deserialize, Serialize};

/// `ExportLogsServiceRequest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportLogsServiceRequest {
    pub resource_logs: Vec<ResourceLogs>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLogs {
    pub resource: Resource,
    pub scope_logs: Vec<ScopeLogs>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    pub attributes: Vec<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeLogs {
    pub scope: InstrumentationScope,
    pub log_records: Vec<LogRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstrumentationScope {
    pub name: String,
    pub version: String,
}

/// `LogRecord`. `timeUnixNano` is a fixed64, so a decimal string in OTLP/JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogRecord {
    pub time_unix_nano: String,
    pub observed_time_unix_nano: String,
    /// `SEVERITY_NUMBER_INFO` = 9.
    pub severity_number: i32,
    pub severity_text: String,
    pub body: AnyValue,
    pub attributes: Vec<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyValue {
    pub key: String,
    pub value: AnyValue,
}

/// `AnyValue`: exactly one of its fields is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AnyValue {
    StringValue(String),
    /// An int64, so a decimal string in OTLP/JSON.
    IntValue(String),
}

impl AnyValue {
    pub fn as_str(&self) -> &str {
        match self {
            AnyValue::StringValue(s) | AnyValue::IntValue(s) => s,
        }
    }
}

/// `SEVERITY_NUMBER_INFO`.
pub const SEVERITY_INFO: i32 = 9;

impl KeyValue {
    pub fn string(key: &str, value: impl Into<String>) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: AnyValue::StringValue(value.into()),
        }
    }

    pub fn int(key: &str, value: u64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: AnyValue::IntValue(value.to_string()),
        }
    }
}

impl LogRecord {
    /// The value of attribute `key`, if present.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| kv.value.as_str())
    }
}
