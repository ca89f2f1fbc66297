//! The presets over logs written by the real programs, spawned by the
//! tests into temp dirs: PostgreSQL, Redis, nginx, MariaDB, and logback
//! (Spring Boot's pattern) with the JDK. Each fails with what to install
//! when its program is missing (`.ci/run` installs them), waits for log
//! lines and ports rather than sleeping, and kills what it spawned, also
//! when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod check;
mod logback;
mod mariadb;
mod nginx;
mod postgres;
mod process;
mod redis;
