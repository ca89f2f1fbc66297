//! The SQL gate of `query_mysql` on any text: it never panics, every refusal
//! is one of its documented errors, and the statement's normalized form
//! (the scope fingerprint's input) is a fixed point of normalization.
#![no_main]

use libfuzzer_sys::fuzz_target;
use projectors_mysql::Error;
use projectors_mysql::gate::{AllowedSchemas, check_query};

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let schemas = AllowedSchemas::new(["app", "shop"]);
    match check_query(sql, 0, &schemas) {
        Ok(_) | Err(Error::QueryRejected { .. } | Error::ParamCountMismatch { .. }) => {}
        Err(other) => panic!("the gate answered outside its contract: {other:?}"),
    }
    let normalized = projectors_mysql::normalize_sql(sql);
    assert_eq!(projectors_mysql::normalize_sql(&normalized), normalized);
});
