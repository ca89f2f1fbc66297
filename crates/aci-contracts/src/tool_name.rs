//! The names of the three frozen tools, their titles and their frozen
//! descriptions: the bottom layer of the contract files (names <- schema
//! generation <- definitions <- frozen files).
//!
//! Descriptions are implementation-neutral: they say when to call the tool,
//! its minimal input, and what it cannot query, and nothing about how it is
//! built, hosted, bounded or recorded.

/// The frozen tools of this contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolName {
    /// `lookup_knowledge`: passages from the operations knowledge base.
    LookupKnowledge,
    /// `query_logs`: recent log evidence of one logical topic.
    QueryLogs,
    /// `query_mysql`: one read-only query against a named business database.
    QueryMysql,
}

impl ToolName {
    /// All three, in export order.
    pub const ALL: [Self; 3] = [Self::LookupKnowledge, Self::QueryLogs, Self::QueryMysql];

    /// The stable snake_case name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LookupKnowledge => "lookup_knowledge",
            Self::QueryLogs => "query_logs",
            Self::QueryMysql => "query_mysql",
        }
    }

    /// Parses the stable name (exact).
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// A short human title.
    #[must_use]
    pub const fn title(self) -> &'static str {
        match self {
            Self::LookupKnowledge => "Look up operations knowledge",
            Self::QueryLogs => "Query recent logs",
            Self::QueryMysql => "Query a business database (read-only)",
        }
    }

    /// The frozen description shown to the model.
    #[must_use]
    pub const fn description(self) -> &'static str {
        match self {
            Self::LookupKnowledge => {
                "Search the operations knowledge base (runbooks and troubleshooting guides) for \
                 passages about a symptom, error message or component. Call it when you need \
                 documented causes, checks or remediation steps. Input: `query`, a short \
                 plain-language description. It cannot read live logs, metrics or databases. \
                 NO_EVIDENCE means only that no passage matched this query."
            }
            Self::QueryLogs => {
                "Search recent logs of one logical topic (APPLICATION, DATABASE_SLOW_QUERY or \
                 SYSTEM_EVENTS) for messages matching words. Call it to check what happened in a \
                 time window before you name a cause. Input: `topic`, `query`, and optionally \
                 `lookback_minutes` (1 to 1440, default 60). It returns message patterns with \
                 counts and a timeline of matching events; it cannot search other topics, older \
                 history, metrics or databases. NO_EVIDENCE means nothing matched in that topic \
                 and window, not that the system is healthy."
            }
            Self::QueryMysql => {
                "Run one read-only SELECT against a named business database to confirm facts \
                 such as order, job or account states. Call it when logs or runbooks point to \
                 data you must check. Input: `data_source` (a logical name you were given), \
                 `sql` with `?` placeholders, and `params` with their values. It cannot change \
                 data, run more than one statement, or reach a database that has no name here. \
                 NO_EVIDENCE means the query returned no rows."
            }
        }
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
