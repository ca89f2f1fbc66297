//! Loads the pinned model and embeds texts that stress the C tokenizer, for
//! `valgrind --error-exitcode=1` in CI: `cargo run -p e5-ffi --example
//! valgrind_smoke -- <library> <model>`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use e5_ffi::{Model, Role};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [library, model] = args.as_slice() else {
        eprintln!("usage: valgrind_smoke <library> <model>");
        std::process::exit(2);
    };
    let model = Model::load(Path::new(library), Path::new(model)).unwrap();
    let long = "Caused by: java.sql.SQLTransientConnectionException ".repeat(60);
    let ligatures = "\u{FDFA}".repeat(40);
    let texts = [
        "",
        "a\0b",
        "硬盘满了怎么办",
        "컨테이너 메모리가 터졌어요",
        ligatures.as_str(),
        long.as_str(),
    ];
    for role in [Role::Query, Role::Passage] {
        let vectors = model.embed(&texts, role).unwrap();
        assert_eq!(vectors.len(), texts.len());
        assert!(vectors.iter().flatten().all(|x| x.is_finite()));
    }
    drop(model);
    println!("valgrind_smoke: ok");
}
