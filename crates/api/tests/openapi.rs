//! One report model: the JSON the core writes and the OpenAPI document the API
//! serves come from the same types, so a field added to the model shows in
//! both. Every key of a report in which every field has a value is a property
//! of its schema, and every property of the schema is a key, at every depth;
//! every value has its property's type.

use crate::support;

use std::collections::BTreeSet;

use overseer_api::openapi::ApiDoc;
use serde_json::Value;
use support::{full_report, report};
use utoipa::OpenApi;

/// The document, as `/openapi.json` serves it.
fn document() -> Value {
    serde_json::from_str(&ApiDoc::openapi().to_json().unwrap()).unwrap()
}

/// The schema a `$ref` names, or the schema itself.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("a component reference: {reference}"));
            let target = &doc["components"]["schemas"][name];
            assert!(!target.is_null(), "{reference} is in the document");
            resolve(doc, target)
        }
        None => schema,
    }
}

/// The JSON types a schema allows (`"type": "string"` or `["string", "null"]`).
fn types(schema: &Value) -> BTreeSet<&str> {
    match &schema["type"] {
        Value::String(t) => [t.as_str()].into(),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => BTreeSet::new(),
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The properties of an object schema, `allOf` parts merged (the executor
/// instance's verdict is flattened into it).
fn properties<'a>(doc: &'a Value, schema: &'a Value) -> Vec<(&'a String, &'a Value)> {
    let schema = resolve(doc, schema);
    let mut found: Vec<(&String, &Value)> = schema["properties"]
        .as_object()
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        found.extend(properties(doc, part));
    }
    found
}

/// Walks `value` beside `schema`: checks keys against properties and each
/// value against its type; returns the paths it checked.
fn check(doc: &Value, schema: &Value, value: &Value, path: &str, seen: &mut Vec<String>) {
    seen.push(path.to_owned());
    let schema = resolve(doc, schema);
    // `Option<T>`: `oneOf: [{"type": "null"}, T]`; take the branch the value is.
    if let Some(branches) = schema["oneOf"].as_array() {
        let branch = branches
            .iter()
            .find(|b| (value.is_null()) == (types(resolve(doc, b)) == ["null"].into()))
            .unwrap_or_else(|| panic!("{path}: no branch of {schema} for {value}"));
        return check(doc, branch, value, path, seen);
    }
    match value {
        Value::Object(object) => {
            let properties = properties(doc, schema);
            let keys: BTreeSet<&str> = object.keys().map(String::as_str).collect();
            let named: BTreeSet<&str> = properties.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                keys, named,
                "{path}: the JSON's keys are the schema's properties"
            );
            for (key, property) in properties {
                check(doc, property, &object[key], &format!("{path}.{key}"), seen);
            }
        }
        Value::Array(items) => {
            assert!(types(schema).contains("array"), "{path}: {schema}");
            for (i, item) in items.iter().enumerate() {
                check(doc, &schema["items"], item, &format!("{path}[{i}]"), seen);
            }
        }
        scalar => {
            let allowed = types(schema);
            assert!(
                allowed.contains(type_of(scalar)),
                "{path}: {scalar} is not of {allowed:?}"
            );
            if let Some(values) = schema["enum"].as_array() {
                assert!(
                    values.contains(scalar),
                    "{path}: {scalar} not in {values:?}"
                );
            }
            if schema["format"] == "date-time" && scalar.is_string() {
                let text = scalar.as_str().unwrap();
                assert!(
                    chrono::DateTime::parse_from_rfc3339(text).is_ok() && text.ends_with("+00:00"),
                    "{path}: {text} is Python's isoformat() of a UTC time"
                );
            }
        }
    }
}

fn health_schema(doc: &Value) -> &Value {
    &doc["paths"]["/api/v2/monitor/health"]["get"]["responses"]["200"]["content"]["application/json"]
        ["schema"]
}

#[test]
fn the_health_route_answers_with_the_reports_own_schema() {
    let doc = document();
    assert_eq!(
        health_schema(&doc)["$ref"],
        "#/components/schemas/HealthReport"
    );
    assert_eq!(
        doc["paths"]["/api/v2/monitor/health"]["get"]["responses"]["503"]["content"]["application/json"]
            ["schema"]["$ref"],
        "#/components/schemas/HealthReport"
    );
}

#[test]
fn every_field_of_the_model_is_in_both_the_json_and_the_schema() {
    let doc = document();
    let report = full_report();
    let json: Value = serde_json::from_str(report.json()).unwrap();
    let mut seen = Vec::new();
    check(&doc, health_schema(&doc), &json, "$", &mut seen);

    // The report did have every part: each component with an instance, and an
    // executor instance with each field, its reason included.
    for path in [
        "$.metadatabase.status",
        "$.scheduler.instances[0].latest_scheduler_heartbeat",
        "$.triggerer.instances[0].latest_triggerer_heartbeat",
        "$.dag_processor.instances[0].latest_dag_processor_heartbeat",
        "$.executor.latest_executor_heartbeat",
        "$.executor.instances[0].health",
        "$.executor.instances[0].reason",
        "$.executor.instances[0].checked_at",
        "$.executor.instances[0].since",
        "$.executor.instances[0].previous",
        "$.executor.instances[0].detail.queues[0].name",
        "$.executor.instances[0].detail.queues[0].broker",
        "$.executor.instances[0].detail.queues[0].depth",
        "$.executor.instances[0].detail.queues[0].consumers",
        "$.executor.instances[0].detail.workers[0].name",
        "$.executor.instances[0].detail.workers[0].queues[0]",
        "$.executor.instances[0].detail.workers[0].heartbeat.last",
        "$.executor.instances[0].detail.workers[0].heartbeat.every_ms",
        "$.executor.instances[0].detail.workers[0].heartbeat.loadavg[0]",
        "$.executor.instances[0].detail.queued_tasks.count",
        "$.executor.instances[0].detail.queued_tasks.oldest_seconds",
        "$.executor.instances[0].detail.queued_tasks.queues[0].queue",
        "$.executor.instances[0].detail.queued_tasks.queues[0].count",
        "$.executor.instances[0].detail.queued_tasks.queues[0].oldest_seconds",
        "$.executor.instances[0].detail.queued_tasks.queues[0].overdue",
        // What cannot be told, as the schema allows it: null.
        "$.executor.instances[1].detail.queues[0].depth",
        "$.executor.instances[1].detail.workers",
        "$.executor.instances[1].detail.queued_tasks",
        "$.executor.instances[2].detail",
    ] {
        assert!(seen.iter().any(|p| p == path), "{path} checked: {seen:?}");
    }
    let instances = &json["executor"]["instances"];
    assert!(
        !instances[0]["detail"].to_string().contains("null"),
        "every field of the first detail has a value: {}",
        instances[0]["detail"]
    );
    assert!(instances[1]["detail"]["workers"].is_null());
    assert_eq!(instances[0]["previous"], "unhealthy");
    assert!(instances[0]["since"].is_string());
    assert!(instances[1]["since"].is_null(), "not known");
    assert!(instances[2]["detail"].is_null(), "another host's row");
    assert!(
        json["executor"]["instances"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["reason"].is_string()),
        "a reason with a value"
    );
}

#[test]
fn a_report_with_nothing_in_it_still_matches_and_leaves_out_only_what_is_optional() {
    let doc = document();
    let empty = report(Vec::new(), false);
    let json: Value = serde_json::from_str(empty.json()).unwrap();
    let schema = resolve(&doc, health_schema(&doc));
    // Without an executor row the entry is absent, and only it may be.
    let required: BTreeSet<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let keys: BTreeSet<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, required);
    let object = json.as_object().unwrap();
    for (key, property) in properties(&doc, schema) {
        if let Some(value) = object.get(key.as_str()) {
            check(&doc, property, value, &format!("$.{key}"), &mut Vec::new());
        }
    }
}

/// The description a property carries, beside its `$ref` or on it.
fn description(schema: &Value) -> Option<&str> {
    schema["description"].as_str().or_else(|| {
        schema["oneOf"]
            .as_array()?
            .iter()
            .find_map(|branch| branch["description"].as_str())
    })
}

/// True when a property's schema allows `null`.
fn nullable(doc: &Value, schema: &Value) -> bool {
    types(schema).contains("null")
        || schema["oneOf"].as_array().is_some_and(|branches| {
            branches
                .iter()
                .any(|b| types(resolve(doc, b)) == ["null"].into())
        })
}

/// The component a property refers to: itself, its non-null branch, or its items.
fn target(schema: &Value) -> Option<&str> {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| {
            schema["oneOf"]
                .as_array()?
                .iter()
                .find_map(|branch| branch["$ref"].as_str())
        })
        .or_else(|| schema["items"]["$ref"].as_str())?;
    reference.strip_prefix("#/components/schemas/")
}

/// A property as expected: its name, the component it refers to, and whether
/// it may be `null`.
type Property = (&'static str, Option<&'static str>, bool);

#[test]
fn the_executor_instance_documents_its_detail_and_every_part_of_it() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let instance = properties(&doc, &schemas["ExecutorInstance"]);
    let (_, detail) = instance
        .iter()
        .find(|(name, _)| *name == "detail")
        .expect("the executor instance has a detail");
    assert!(
        nullable(&doc, detail),
        "another host's row has none: {detail}"
    );
    assert_eq!(target(detail), Some("ShownDetail"));
    assert!(
        description(detail).is_some_and(|d| d.contains("null")),
        "{detail}"
    );

    // Each part: (schema, its properties, each with the component it refers
    // to and whether it may be null).
    let parts: [(&str, &[Property]); 11] = [
        (
            "ShownDetail",
            &[
                ("queues", Some("QueueDetail"), false),
                ("queues_left_out", None, false),
                ("workers", Some("WorkerDetail"), true),
                ("workers_left_out", None, false),
                ("queued_tasks", Some("ShownQueuedTasks"), true),
                ("brokers", Some("BrokerDetail"), false),
                ("worker_events", Some("EventsDetail"), false),
                ("canary", Some("ShownCanary"), true),
                ("capacity", Some("CapacityDetail"), true),
            ],
        ),
        (
            "CapacityDetail",
            &[
                ("slots", None, false),
                ("parallelism", None, false),
                ("schedulers", None, false),
                ("running", None, false),
                ("queued", None, false),
                ("scheduled", None, false),
            ],
        ),
        (
            "ShownCanary",
            &[
                ("dag_id", None, false),
                ("dag", None, false),
                ("queues", Some("CanaryOnQueue"), false),
                ("queues_left_out", None, false),
            ],
        ),
        (
            "CanaryOnQueue",
            &[
                ("queue", None, false),
                ("run_id", None, false),
                ("state", None, true),
                ("waiting_seconds", None, true),
                ("pickup_seconds", None, true),
                ("run_seconds", None, true),
                ("last_success", None, true),
            ],
        ),
        (
            "BrokerDetail",
            &[
                ("broker", None, false),
                ("delivered", None, true),
                ("started_at", None, true),
            ],
        ),
        (
            "EventsDetail",
            &[
                ("broker", None, false),
                ("state", None, false),
                ("received", None, false),
                ("subscribed", None, false),
                ("overflows", None, false),
                ("backlog", None, true),
            ],
        ),
        (
            "QueueDetail",
            &[
                ("name", None, false),
                ("broker", None, false),
                ("depth", None, true),
                ("consumers", None, true),
            ],
        ),
        (
            "WorkerDetail",
            &[
                ("name", None, false),
                ("queues", None, true),
                ("state", None, true),
                ("concurrency", None, true),
                ("free_concurrency", None, true),
                ("heartbeat", Some("WorkerHeartbeat"), true),
            ],
        ),
        (
            "WorkerHeartbeat",
            &[
                ("last", None, false),
                ("every_ms", None, false),
                ("active", None, true),
                ("processed", None, true),
                ("loadavg", None, true),
                ("software", None, true),
            ],
        ),
        (
            "ShownQueuedTasks",
            &[
                ("count", None, false),
                ("oldest_seconds", None, true),
                ("queues", Some("QueuedOnQueue"), false),
                ("queues_left_out", None, false),
            ],
        ),
        (
            "QueuedOnQueue",
            &[
                ("queue", None, false),
                ("count", None, false),
                ("oldest_seconds", None, true),
                ("overdue", None, false),
            ],
        ),
    ];
    for (name, expected) in parts {
        let schema = &schemas[name];
        assert!(
            schema["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{name} is described: {schema}"
        );
        let found = properties(&doc, schema);
        let names: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        let mut wanted: Vec<&str> = expected.iter().map(|(k, _, _)| *k).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        wanted.sort_unstable();
        assert_eq!(sorted, wanted, "{name}'s properties");
        for (property, refers_to, may_be_null) in expected {
            let schema = found.iter().find(|(k, _)| k == property).unwrap().1;
            assert!(
                description(schema).is_some_and(|d| !d.is_empty()),
                "{name}.{property} is described: {schema}"
            );
            assert_eq!(target(schema), *refers_to, "{name}.{property}: {schema}");
            assert_eq!(
                nullable(&doc, schema),
                *may_be_null,
                "{name}.{property} may be null: {schema}"
            );
        }
    }
}
