//! tarn-txg (placeholder)
