//! tarn-alloc (placeholder)
