//! The lookup_knowledge tool: RAG projector, scope normalizer and a bundled Markdown knowledge base.
