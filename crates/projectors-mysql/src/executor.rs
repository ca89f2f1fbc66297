//! The `query_mysql` executor: the [`MysqlSource`] port adapted to the
//! boundary's [`Executor`](invocation_core::Executor).

use aci_contracts::QueryMysqlRequest;
use async_trait::async_trait;
use invocation_core::{ExecutionContext, ExecutionError, PortCall, PortExecutor};

use crate::{MysqlQuery, MysqlSource, RawResultSet};

/// The `query_mysql` executor: runs the statement on a [`MysqlSource`]
/// ([`RunStatement`]) and waits for its kills when drained; `source()` gives
/// the port back.
pub type QueryMysqlExecutor<S> = PortExecutor<S, RunStatement>;

/// How `query_mysql` asks a [`MysqlSource`]: the statement and its params
/// against the named data source; draining waits for the source's kills of
/// cancelled statements.
#[derive(Debug)]
pub enum RunStatement {}

#[async_trait]
impl<S: MysqlSource> PortCall<S> for RunStatement {
    type Request = QueryMysqlRequest;
    type Raw = RawResultSet;

    async fn call(
        source: &S,
        request: &QueryMysqlRequest,
        _context: &ExecutionContext,
    ) -> Result<RawResultSet, ExecutionError> {
        let query = MysqlQuery {
            data_source: &request.data_source,
            sql: &request.sql,
            params: &request.params,
        };
        Ok(source.query(query).await?)
    }

    async fn drain(source: &S) {
        source.drain().await;
    }
}
