//! `nginx_error`: nginx from Debian with its own prefix and configuration
//! in a temp dir, on a free port, asked for a missing file and for an
//! upstream that refuses connections.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use projectors_logs::LogFormat;

use super::check::{copytruncate, count_level, matches, parsed, topic};
use super::process::{
    Spawned, free_port, next_second_after, now_ms, program, wait_for, wait_for_log,
};

fn get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn nginx_error_log_levels_and_requests() {
    let nginx = program("nginx", &["/usr/sbin"], "nginx-light");
    let dir = tempfile::Builder::new()
        .prefix("aci-nginx-")
        .tempdir()
        .unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("www")).unwrap();
    std::fs::create_dir(d.join("tmp")).unwrap();
    // A port nothing listens on, for the upstream.
    let closed = free_port();
    let mut server = None;
    let mut port = 0;
    for _ in 0..5 {
        port = free_port();
        let config = format!(
            "daemon off; master_process off; worker_processes 1;\n\
             pid {d}/nginx.pid; error_log {d}/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp;\n\
               fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
               server {{ listen 127.0.0.1:{port}; root {d}/www;\n\
                 location /api/ {{ proxy_pass http://127.0.0.1:{closed}; }} }} }}\n",
            d = d.display()
        );
        std::fs::write(d.join("nginx.conf"), config).unwrap();
        let mut child = Spawned::spawn(
            "nginx",
            Command::new(&nginx)
                .arg("-p")
                .arg(d)
                .arg("-c")
                .arg(d.join("nginx.conf"))
                .arg("-e")
                .arg(d.join("error.log"))
                .env("TZ", "UTC")
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let mut up = false;
        wait_for("nginx listening or failing", || {
            up = TcpStream::connect(("127.0.0.1", port)).is_ok();
            up || std::fs::read_to_string(d.join("error.log")).is_ok_and(|t| t.contains("[emerg]"))
        });
        if up {
            child.assert_running();
            server = Some(child);
            break;
        }
        drop(child);
        std::fs::remove_file(d.join("error.log")).unwrap();
    }
    let _server = server.expect("nginx came up on a free port");
    let log = d.join("error.log");
    let section = topic(d, "error.log*", LogFormat::NginxError);
    let started = now_ms() - 60_000;
    let batch = |n: usize| {
        for i in 0..n {
            assert!(get(port, &format!("/missing-{i}.html")).starts_with("HTTP/1.1 404"));
            assert!(get(port, &format!("/api/orders/{i}")).starts_with("HTTP/1.1 502"));
        }
    };
    batch(4);
    let text = wait_for_log(&log, "while connecting to upstream", 4);
    wait_for_log(&log, "missing-3.html", 1);
    let all = parsed(&section, &log);
    assert_eq!(all.unparsed + all.orphan_lines, 0, "{text}");
    assert_eq!(count_level(&all.events, "error"), 8);
    let end = now_ms() + 60_000;
    let (refused, _) = matches(&section, "connection refused upstream", started, end);
    assert_eq!(refused.len(), 4);
    assert!(refused[0].fields.contains_key("connection"));
    assert_eq!(refused[0].fields["pid"], refused[0].fields["tid"]);
    let (missing, _) = matches(&section, "no such file", started, end);
    assert_eq!(missing.len(), 4);
    assert_eq!(count_level(&missing, "error"), 4);
    let (notices, _) = matches(&section, "nginx/", started, end);
    assert_eq!(count_level(&notices, "notice"), 1);

    copytruncate(&log, &log.with_file_name("error.log.1.gz"));
    let rotated_at = now_ms();
    next_second_after(rotated_at);
    batch(2);
    wait_for_log(&log, "while connecting to upstream", 2);
    let (first, _) = matches(&section, "refused", started, rotated_at);
    let (second, _) = matches(
        &section,
        "refused",
        (rotated_at / 1000 + 1) * 1000,
        now_ms() + 60_000,
    );
    let (both, _) = matches(&section, "refused", started, now_ms() + 60_000);
    assert_eq!((first.len(), second.len(), both.len()), (4, 2, 6));
}
