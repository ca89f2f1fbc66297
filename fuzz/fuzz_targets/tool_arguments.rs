//! Any bytes as a tool call's arguments, decoded as preflight decodes them:
//! never a panic; an accepted request survives a round trip through its own
//! JSON, and its scope (the fingerprint's input) is computed.
#![no_main]

use aci_contracts::{LookupKnowledgeRequest, QueryLogsRequest, QueryMysqlRequest};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn round_trip<R: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    data: &[u8],
) -> Option<R> {
    let request: R = serde_json::from_slice(data).ok()?;
    let text = serde_json::to_string(&request).expect("an accepted request serializes");
    let again: R = serde_json::from_str(&text).expect("its own JSON is accepted");
    assert_eq!(again, request);
    Some(request)
}

fuzz_target!(|data: &[u8]| {
    if let Some(request) = round_trip::<LookupKnowledgeRequest>(data) {
        let _ = request.validate();
    }
    if let Some(request) = round_trip::<QueryLogsRequest>(data)
        && projectors_logs::request_is_valid(&request)
    {
        let _ = projectors_logs::query_logs_scope(&request);
    }
    if let Some(request) = round_trip::<QueryMysqlRequest>(data)
        && request.validate().is_ok()
    {
        let _ = projectors_mysql::query_mysql_scope(&request);
    }
});
