//! Loads the pinned model and embeds a few short texts that stress the C
//! tokenizer, for `valgrind --error-exitcode=1` in CI: `cargo run -p e5-ffi
//! --example valgrind_smoke -- <library> <model>`.
//!
//! Small on purpose: memcheck runs the library's AVX2 code about 300 times
//! slower than the CPU does (about a second per token), so a few dozen
//! tokens are what fits CI's budget: some 40 s under valgrind, a third of
//! it the model load. It covers the model load (the parser's pointer
//! arithmetic over the whole image), both roles, a batch of several texts
//! (the pointer array and the output offsets), the empty text, a NUL byte,
//! U+FDFA (the one code point whose normalization outgrew the tokenizer's
//! buffers) and multi-byte scripts, and the model's free. Long texts (the
//! 512-token windows) are left to the model's tests (`tests/model.rs`),
//! which run natively.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::time::Instant;

use e5_ffi::{DIMENSIONS, Model, Role};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [library, model] = args.as_slice() else {
        eprintln!("usage: valgrind_smoke <library> <model>");
        std::process::exit(2);
    };
    let started = Instant::now();
    let model = Model::load(Path::new(library), Path::new(model)).unwrap();
    eprintln!("valgrind_smoke: model loaded ({:.1?})", started.elapsed());
    let batches: [(Role, &[&str]); 2] = [
        (Role::Query, &["硬盘满了怎么办"]),
        (
            Role::Passage,
            &["컨테이너 메모리 부족", "", "a\0b", "\u{FDFA}"],
        ),
    ];
    for (role, texts) in batches {
        let vectors = model.embed(texts, role).unwrap();
        assert_eq!(vectors.len(), texts.len());
        for vector in &vectors {
            assert_eq!(vector.len(), DIMENSIONS);
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-3, "norm {norm}");
        }
        eprintln!(
            "valgrind_smoke: {} {role:?} text(s) embedded ({:.1?})",
            texts.len(),
            started.elapsed()
        );
    }
    drop(model);
    println!("valgrind_smoke: ok");
}
