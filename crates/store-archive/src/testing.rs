//! Test support (feature `testing`): a throwaway database on a real
//! PostgreSQL server, never a fake.
//!
//! The server is `ARCHIVE_URL`, else `DATABASE_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres` (trust authentication on
//! the development machines and CI). Each [`TestDatabase`] creates a
//! database with a random name and drops it when dropped; its URL says
//! `sslmode=disable` unless the server URL names an `sslmode`. Without a server
//! the tests fail with a clear message: they never skip.

use std::time::Duration;

/// The server's administrative URL (see the module docs).
#[must_use]
pub fn server_url() -> String {
    std::env::var("ARCHIVE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database of its own on the test server, dropped with this value.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let connected = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await;
    match connected {
        Ok(Ok((client, connection))) => {
            tokio::spawn(connection);
            client
        }
        _ => panic!(
            "archive tests need a PostgreSQL server: set ARCHIVE_URL or DATABASE_URL, \
             or run one at 127.0.0.1:5432 with trust authentication"
        ),
    }
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |scheme| {
        scheme
            + 3
            + base[scheme + 3..]
                .find('/')
                .unwrap_or(base.len() - scheme - 3)
    });
    let mut out = format!("{}/{database}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

impl TestDatabase {
    /// Creates a fresh database.
    ///
    /// # Panics
    /// When no server can be reached, or the database cannot be created.
    pub async fn create() -> Self {
        let server = server_url();
        let name = format!("aci_test_{:016x}", fastrand::u64(..));
        let client = admin(&server).await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|error| panic!("creating the test database failed: {error}"));
        let mut url = with_database(&server, &name);
        // The local server's certificate is self-signed (Debian's default):
        // tests talk plain TCP unless the URL says otherwise.
        if !url.contains("sslmode=") {
            url.push_str(if url.contains('?') { "&" } else { "?" });
            url.push_str("sslmode=disable");
        }
        Self { url, name }
    }

    /// Its URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A side connection for what tests inspect or tamper with.
    pub async fn client(&self) -> tokio_postgres::Client {
        admin(&self.url).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // A runtime of its own: the test's may be shutting down.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok(Ok((client, connection))) = tokio::time::timeout(
                    Duration::from_secs(10),
                    tokio_postgres::connect(&server_url(), tokio_postgres::NoTls),
                )
                .await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_name_is_replaced() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:5432", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}
