//! tarn-pool (placeholder)
