//! [`PortExecutor`]: the one executor of the tool crates, over a source port
//! and the [`PortCall`] that says how the tool asks it.

use std::fmt::{self, Debug};
use std::marker::PhantomData;

use async_trait::async_trait;
use serde::Serialize;

use crate::{ExecutionContext, ExecutionError, Executor};

/// How a tool asks its source port `S`: the one piece of an executor a tool
/// crate writes. The crate names it with an uninhabited marker type and
/// spells its executor `PortExecutor<S, Marker>`.
///
/// # Behavior
/// - [`call`](Self::call) turns the decoded request into the port's query
///   (resolving what the boundary's context fixes, such as a window from
///   [`ExecutionContext::now`]) and the port's answer into the raw response;
///   the port's error converts with `?` (category and retryability kept).
/// - [`drain`](Self::drain) waits for the port's own cleanup tasks; the
///   default has nothing to wait for.
#[async_trait]
pub trait PortCall<S: Send + Sync + 'static>: Send + Sync + 'static {
    /// The decoded agent request.
    type Request: Send + Sync + 'static;
    /// The complete raw response, recorded for the harness.
    type Raw: Serialize + Send + Sync + 'static;

    /// Asks `source` for `request`.
    ///
    /// # Errors
    /// [`ExecutionError`] with the agent-safe category of the failure.
    async fn call(
        source: &S,
        request: &Self::Request,
        context: &ExecutionContext,
    ) -> Result<Self::Raw, ExecutionError>;

    /// Waits for `source`'s cleanup tasks ([`Executor::drain`]).
    async fn drain(_source: &S) {}
}

/// A tool's executor: its source port `S`, asked as `C` says.
///
/// `projectors_rag::KnowledgeExecutor<S>`, `projectors_logs::LogExecutor<S>`
/// and `projectors_mysql::QueryMysqlExecutor<S>` are this type.
pub struct PortExecutor<S, C> {
    source: S,
    call: PhantomData<fn() -> C>,
}

impl<S, C> PortExecutor<S, C> {
    /// An executor over `source`.
    pub const fn new(source: S) -> Self {
        Self {
            source,
            call: PhantomData,
        }
    }

    /// The source port.
    #[must_use]
    pub const fn source(&self) -> &S {
        &self.source
    }
}

impl<S: Debug, C> Debug for PortExecutor<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortExecutor")
            .field("source", &self.source)
            .field("call", &std::any::type_name::<C>())
            .finish()
    }
}

impl<S: Clone, C> Clone for PortExecutor<S, C> {
    fn clone(&self) -> Self {
        Self::new(self.source.clone())
    }
}

#[async_trait]
impl<S, C> Executor for PortExecutor<S, C>
where
    S: Send + Sync + Debug + 'static,
    C: PortCall<S>,
{
    type Request = C::Request;
    type Raw = C::Raw;

    async fn execute(
        &self,
        request: &C::Request,
        context: &ExecutionContext,
    ) -> Result<C::Raw, ExecutionError> {
        C::call(&self.source, request, context).await
    }

    async fn drain(&self) {
        C::drain(&self.source).await;
    }
}
