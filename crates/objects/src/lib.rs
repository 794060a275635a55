//! tarn-objects (placeholder)
