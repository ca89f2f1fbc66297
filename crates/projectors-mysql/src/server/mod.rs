//! The real read-only adapter: [`MysqlAsyncSource`] over `mysql_async`.

mod config;
mod convert;
mod executor;

pub use config::{
    DEFAULT_CLIENT_GRACE, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FETCH_ROWS, DEFAULT_MAX_RAW_BYTES,
    DEFAULT_MAX_VALUE_BYTES, DEFAULT_STATEMENT_TIMEOUT, DataSourceConfig, MysqlConfig,
};
pub use executor::MysqlAsyncSource;
